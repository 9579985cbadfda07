"""Recipe lint: what loads but can never hold, reported with recipe, file and line."""

from __future__ import annotations

from dataclasses import dataclass

from msgspec import UNSET

from cairn.recipes.catalog import Catalog, RecipeEntry
from cairn.recipes.evaluate import split_path
from cairn.recipes.model import PHASES, ConstraintSpec
from cairn.snapshot.readings import collector_of


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One problem in one recipe."""

    recipe: str
    file: str
    line: int | None
    field: str
    reading: str
    message: str

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        return f"{where}: {self.field}: {self.message}"


def lint_catalog(catalog: Catalog) -> list[Finding]:
    """Every constraint, in every overlay and mixin, on a reading that nothing produces:
    neither a snapshot collector (`cairn.snapshot.readings`) nor a check's `emits`."""
    emitted = {name for check in catalog.checks.values() for name in check.emits}
    findings: list[Finding] = []
    for entry in [*catalog.overlays.values(), *catalog.mixins.values()]:
        findings += _constraints(entry, entry.spec.constraints, ("constraints",), emitted)
        for phase in PHASES:
            spec_phase = getattr(entry.spec.validation, phase)
            if spec_phase is not UNSET:
                findings += _constraints(entry, spec_phase.constraints,
                                         ("validation", phase, "constraints"), emitted)
    return sorted(findings, key=lambda f: (f.file, f.line or 0))


def _constraints(entry: RecipeEntry, constraints: list[ConstraintSpec],
                 where: tuple[str, ...], emitted: set[str]) -> list[Finding]:
    out = []
    for index, constraint in enumerate(constraints):
        name = constraint.name
        if name in emitted or (split_path(name) is not None and collector_of(name) is not None):
            continue
        field = ".".join(where) + f"[{index}].name"
        out.append(Finding(recipe=entry.name, file=entry.file,
                           line=entry.line(*where, index, "name"), field=field, reading=name,
                           message=f"recipe {entry.name!r}: no collector or check produces the "
                                   f"reading {name!r}, so this constraint can never pass"))
    return out
