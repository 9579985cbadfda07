"""NVIDIA AICR's recipe data as its files write it: overlays, mixins, the component registry,
the validator catalog, criteria files and resolved `RecipeResult` documents.

AICR decodes its YAML leniently (Go's yaml.v3 ignores keys it does not know), and Cairn reads
it the same way, so data written for a newer AICR still loads; what Cairn cannot carry into
its own catalog form is listed by `cairn recipe import`. Unset means empty, as in Go: an
overlay's componentRef that leaves `version` empty keeps the version an earlier file set.
"""

from __future__ import annotations

from typing import Any

import msgspec

API_VERSION = "aicr.nvidia.com/v1alpha1"
"""The apiVersion Cairn writes (AICR's recipe, criteria and snapshot documents)."""
API_VERSIONS: tuple[str, ...] = ("aicr.nvidia.com/v1alpha1", "aicr.nvidia.com/v1",
                                 "aicr.run/v1beta1")
"""apiVersions AICR has published its data under; any other is refused."""

ANY = "any"
PHASES: tuple[str, ...] = ("readiness", "deployment", "performance", "conformance")
"""AICR's validation phases, in the order its validator runs them."""
CRITERIA_FIELDS: tuple[str, ...] = ("service", "accelerator", "intent", "os", "platform")


class _Doc(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    pass


class Meta(_Doc):
    name: str = ""


class AicrCriteria(_Doc):
    """Where an overlay applies, or a query; empty and "any" are both the wildcard."""

    service: str = ""
    accelerator: str = ""
    intent: str = ""
    os: str = ""
    platform: str = ""
    nodes: int = 0


class AicrConstraint(_Doc):
    name: str
    value: str = ""
    severity: str = ""
    remediation: str = ""
    unit: str = ""


class ComponentRef(_Doc):
    """One component of a recipe; later files change it field by field (`merge_ref`)."""

    name: str
    namespace: str = ""
    chart: str = ""
    type: str = ""
    source: str = ""
    version: str = ""
    tag: str = ""
    values_file: str = ""
    overrides: dict[str, Any] = {}
    patches: list[str] = []
    dependency_refs: list[str] = []
    manifest_files: list[str] = []
    path: str = ""
    cleanup: bool = False
    expected_resources: list[dict[str, Any]] = []
    health_check_asserts: str = ""

    @property
    def enabled(self) -> bool:
        """`overrides.enabled: false` turns a component off (AICR); anything else keeps it."""
        return self.overrides.get("enabled") is not False


class ValidationPhase(_Doc):
    timeout: str = ""
    constraints: list[AicrConstraint] = []
    checks: list[str] = []
    node_selection: dict[str, Any] | None = None
    infrastructure: str = ""


class Validation(_Doc):
    readiness: ValidationPhase | None = None
    deployment: ValidationPhase | None = None
    performance: ValidationPhase | None = None
    conformance: ValidationPhase | None = None


class MetadataSpec(_Doc):
    base: str = ""
    criteria: AicrCriteria | None = None
    mixins: list[str] = []
    constraints: list[AicrConstraint] = []
    component_refs: list[ComponentRef] = []
    validation: Validation | None = None


class RecipeMetadata(_Doc):
    """`overlays/*.yaml`: kind `RecipeMetadata`."""

    kind: str = ""
    api_version: str = ""
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: MetadataSpec = msgspec.field(default_factory=MetadataSpec)


class MixinSpec(_Doc):
    constraints: list[AicrConstraint] = []
    component_refs: list[ComponentRef] = []


class RecipeMixin(_Doc):
    """`mixins/*.yaml`: kind `RecipeMixin`, a fragment an overlay names in `spec.mixins`."""

    kind: str = ""
    api_version: str = ""
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: MixinSpec = msgspec.field(default_factory=MixinSpec)


class HelmDefaults(_Doc):
    default_repository: str = ""
    default_chart: str = ""
    default_version: str = ""
    default_namespace: str = ""


class KustomizeDefaults(_Doc):
    default_source: str = ""
    default_path: str = ""
    default_tag: str = ""


class RegistryEntry(_Doc):
    """One component of `registry.yaml` (kind `ComponentRegistry`): its defaults."""

    name: str
    display_name: str = ""
    helm: HelmDefaults | None = None
    kustomize: KustomizeDefaults | None = None

    @property
    def type(self) -> str:
        return "Kustomize" if self.kustomize is not None and self.helm is None else "Helm"


class ComponentRegistry(_Doc):
    kind: str = ""
    api_version: str = ""
    components: list[RegistryEntry] = []


class ValidatorEntry(_Doc):
    name: str
    phase: str = ""
    description: str = ""
    image: str = ""
    timeout: str = ""


class ValidatorCatalog(_Doc):
    """`validators/catalog.yaml`: kind `ValidatorCatalog`."""

    kind: str = ""
    api_version: str = ""
    validators: list[ValidatorEntry] = []


class ExcludedOverlay(_Doc):
    name: str
    reason: str = "constraint-failed"


class ConstraintWarning(_Doc):
    overlay: str
    constraint: str
    expected: str
    actual: str = ""
    reason: str = ""


class ResultMetadata(_Doc):
    version: str = ""
    applied_overlays: list[str] = []
    applied_mixins: list[str] = []
    """Cairn's addition: the mixins merged, in order (AICR lists overlays only)."""
    excluded_overlays: list[ExcludedOverlay] = []
    constraint_warnings: list[ConstraintWarning] = []


class RecipeResult(_Doc):
    """A resolved recipe, as `aicr recipe` writes it (kind `RecipeResult`)."""

    kind: str
    api_version: str
    metadata: ResultMetadata = msgspec.field(default_factory=ResultMetadata)
    criteria: AicrCriteria = msgspec.field(default_factory=AicrCriteria)
    constraints: list[AicrConstraint] = []
    component_refs: list[ComponentRef] = []
    deployment_order: list[str] = []
    validation: Validation | None = None

    def ref(self, name: str) -> ComponentRef | None:
        return next((c for c in self.component_refs if c.name == name), None)


def to_document(value: msgspec.Struct) -> dict[str, Any]:
    """The plain mapping a document is written as (camelCase keys, empty fields left out)."""
    data: dict[str, Any] = msgspec.to_builtins(value)
    return data
