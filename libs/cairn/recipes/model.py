"""Recipe files as operators write them (strict Structs) and recipes as resolution returns them.

File-level Structs leave unset fields as `UNSET`, so an overlay that only changes
`components.gpu-operator.values` does not reset the version an earlier file pinned; the merge
in `cairn.recipes.resolve` copies only what a file set. Resolved Structs carry plain values.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

PHASES: tuple[str, ...] = ("readiness", "deployment", "conformance", "performance")
"""Validation phases, in the order a validator runs them."""

Severity = Literal["error", "warning"]
Phase = Literal["readiness", "deployment", "conformance", "performance"]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    pass


class Criteria(_Strict):
    """Where a recipe applies; "any" (or absent) is a wildcard. Also the shape of a query."""

    service: str = "any"
    accelerator: str = "any"
    os: str = "any"
    intent: str = "any"
    platform: str = "any"
    scheduler: str = "any"
    nodes: int = 0


CRITERIA_FIELDS: tuple[str, ...] = (
    "service",
    "accelerator",
    "os",
    "intent",
    "platform",
    "scheduler",
)


class ConstraintSpec(_Strict):
    """One constraint as a file writes it; later files override it field by field, by name."""

    name: str
    value: str | UnsetType = UNSET
    severity: Severity | UnsetType = UNSET
    optional: bool | UnsetType = UNSET
    remediation: str | UnsetType = UNSET
    source: str | UnsetType = UNSET


class ComponentSpec(_Strict):
    """One deployable component as a file writes it; `values` deep-merge across files."""

    name: str
    chart: str | UnsetType = UNSET
    repository: str | UnsetType = UNSET
    version: str | UnsetType = UNSET
    namespace: str | UnsetType = UNSET
    values: dict[str, Any] | UnsetType = UNSET
    dependencies: list[str] | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET
    source: str | UnsetType = UNSET


class CheckSpec(_Strict):
    """One check a phase runs; `with` holds its parameters (deep-merged across files)."""

    name: str
    with_: dict[str, Any] | UnsetType = msgspec.field(default=UNSET, name="with")
    timeout: str | UnsetType = UNSET
    source: str | UnsetType = UNSET


class PhaseSpec(_Strict):
    checks: list[CheckSpec] = []
    constraints: list[ConstraintSpec] = []


class ValidationSpec(_Strict):
    readiness: PhaseSpec | UnsetType = UNSET
    deployment: PhaseSpec | UnsetType = UNSET
    conformance: PhaseSpec | UnsetType = UNSET
    performance: PhaseSpec | UnsetType = UNSET


class RecipeFile(_Strict):
    """One overlay or mixin file. Mixins carry no criteria, base or mixins of their own."""

    name: str
    description: str = ""
    base: str = ""
    mixins: list[str] = []
    criteria: Criteria = msgspec.field(default_factory=Criteria)
    constraints: list[ConstraintSpec] = []
    components: list[ComponentSpec] = []
    validation: ValidationSpec = msgspec.field(default_factory=ValidationSpec)


# ---- resolved ---------------------------------------------------------------------------


class Constraint(msgspec.Struct, kw_only=True, frozen=True):
    """A resolved constraint: `name` is a measurement path or a phase constraint name."""

    name: str
    value: str
    severity: Severity = "error"
    optional: bool = False
    remediation: str = ""
    source: str = ""


class Component(msgspec.Struct, kw_only=True, frozen=True):
    name: str
    chart: str = ""
    repository: str = ""
    version: str = ""
    namespace: str = ""
    values: dict[str, Any] = {}
    dependencies: list[str] = []
    source: str = ""


class Check(msgspec.Struct, kw_only=True, frozen=True):
    name: str
    with_: dict[str, Any] = msgspec.field(default_factory=dict, name="with")
    timeout: str = ""
    source: str = ""


class PhaseChecks(msgspec.Struct, kw_only=True, frozen=True):
    """A resolved recipe's checks and constraints for one validation phase (the validator's
    event of a finished phase is `cairn.events.ValidationPhase`)."""

    checks: list[Check] = []
    constraints: list[Constraint] = []


class Provenance(msgspec.Struct, kw_only=True, frozen=True):
    """Which file set one resolved value; `path` is the value's key path in the recipe."""

    path: list[str]
    value: Any
    file: str


class Recipe(msgspec.Struct, kw_only=True, frozen=True):
    """A fully resolved recipe: what a site should be, with where every value came from."""

    name: str
    description: str
    criteria: Criteria
    applied: list[str]
    """Recipe names merged, in order (base chain, mixins, overlays)."""
    constraints: list[Constraint]
    components: list[Component]
    validation: dict[str, PhaseChecks]
    """Declared phases only, in `PHASES` order."""
    provenance: list[Provenance] = []

    def component(self, name: str) -> Component | None:
        return next((c for c in self.components if c.name == name), None)
