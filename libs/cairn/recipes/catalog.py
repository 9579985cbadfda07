"""Loading a recipe catalog: criteria.yaml, checks.yaml, overlays/*.yaml and mixins/*.yaml.

Every file is checked as it loads, so a bad catalog fails at once with the file, line and
field: names, criteria values, base and mixin references, check names and phases, constraint
expressions and timeouts, and base cycles.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from msgspec import UNSET

from cairn import yamlfile
from cairn.errors import InvalidInput, InvalidName, NotFound
from cairn.names import check_name
from cairn.recipes.checks import CheckDefinition, load_checks, parse_duration
from cairn.recipes.criteria import CriteriaCatalog, load_criteria
from cairn.recipes.expressions import ExpressionError, parse_expression
from cairn.recipes.model import PHASES, ConstraintSpec, Criteria, RecipeFile

RecipeKind = Literal["overlay", "mixin"]
ENV_CATALOG = "CAIRN_RECIPES"


@dataclass
class RecipeEntry:
    """One loaded recipe file: its decoded content (criteria normalised) and where it lives."""

    spec: RecipeFile
    kind: RecipeKind
    file: str
    """Path relative to the catalog root, e.g. `overlays/h100-eks-training.yaml`."""
    doc: yamlfile.YamlDocument | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def line(self, *path: str | int) -> int | None:
        return self.doc.line_of(path) if self.doc is not None else None

    def error(self, message: str, *path: str | int) -> InvalidInput:
        dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        return InvalidInput(
            message, file=self.file, line=self.line(*path), field=dotted.lstrip(".") or None
        )


@dataclass
class Catalog:
    """A loaded catalog. Build one with `load_catalog(dir)` or `Catalog.build(...)`."""

    criteria: CriteriaCatalog
    checks: dict[str, CheckDefinition]
    overlays: dict[str, RecipeEntry]
    mixins: dict[str, RecipeEntry]
    root: Path | None = None
    _index: object = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        criteria: CriteriaCatalog,
        checks: dict[str, CheckDefinition],
        entries: Iterable[RecipeEntry],
        root: Path | None = None,
    ) -> Catalog:
        """Check and index `entries` (overlays and mixins) against criteria and checks."""
        overlays: dict[str, RecipeEntry] = {}
        mixins: dict[str, RecipeEntry] = {}
        for entry in entries:
            if entry.name in overlays or entry.name in mixins:
                raise entry.error(f"recipe {entry.name!r} is defined twice", "name")
            (mixins if entry.kind == "mixin" else overlays)[entry.name] = entry
        catalog = cls(
            criteria, checks, dict(sorted(overlays.items())), dict(sorted(mixins.items())), root
        )
        for entry in [*catalog.overlays.values(), *catalog.mixins.values()]:
            _check_entry(catalog, entry)
        # Imported here: resolve imports this module for the Catalog type.
        from cairn.recipes.resolve import base_chain

        for name in catalog.overlays:
            base_chain(catalog, name)
        return catalog

    def get(self, name: str) -> RecipeEntry:
        """The overlay or mixin called `name`.

        Raises:
            NotFound: no such recipe (exit 4).
        """
        entry = self.overlays.get(name) or self.mixins.get(name)
        if entry is None:
            raise NotFound(f"no recipe named {name!r}", field="recipe")
        return entry


def default_catalog_dir() -> Path:
    """$CAIRN_RECIPES, else the repository's recipes/ (found from this package), else ./recipes."""
    env = os.environ.get(ENV_CATALOG)
    if env:
        return Path(env)
    # libs/cairn/recipes/catalog.py -> repo root; resolve() follows the strict editable links.
    repo = Path(__file__).resolve().parents[3] / "recipes"
    if (repo / "criteria.yaml").is_file():
        return repo
    return Path.cwd() / "recipes"


def load_catalog(root: str | Path | None = None) -> Catalog:
    """Load and check a whole catalog directory (default: `default_catalog_dir()`).

    Raises:
        InvalidInput: any file is malformed or inconsistent (naming file, line and field).
    """
    base = Path(root) if root is not None else default_catalog_dir()
    if not (base / "criteria.yaml").is_file():
        raise InvalidInput(
            f"not a recipe catalog (no criteria.yaml); use --catalog DIR or ${ENV_CATALOG}",
            file=str(base),
        )
    criteria = load_criteria(base / "criteria.yaml")
    checks = load_checks(base / "checks.yaml")
    entries = [
        load_recipe_file(path, "overlay", base)
        for path in sorted((base / "overlays").glob("*.yaml"))
    ]
    entries += [
        load_recipe_file(path, "mixin", base) for path in sorted((base / "mixins").glob("*.yaml"))
    ]
    return Catalog.build(criteria, checks, entries, base)


def load_recipe_file(path: Path, kind: RecipeKind, root: Path | None = None) -> RecipeEntry:
    """Strictly decode one recipe file (checks needing the whole catalog come later)."""
    shown = str(path.relative_to(root)) if root is not None else str(path)
    text = yamlfile.read_text(path, shown=shown)
    return parse_recipe(text, kind, shown, expect_name=path.stem)


def parse_recipe(
    text: str, kind: RecipeKind, file: str, expect_name: str | None = None
) -> RecipeEntry:
    """Decode recipe YAML text; the file name (without .yaml) must equal the recipe name."""
    doc = yamlfile.parse(text, file)
    if doc.data is None:
        raise InvalidInput("the file is empty", file=file)
    spec = yamlfile.convert(doc, RecipeFile)
    entry = RecipeEntry(spec, kind, file, doc)
    try:
        check_name(spec.name, "recipe")
    except InvalidName as exc:
        raise InvalidName(exc.message, file=file, line=entry.line("name"), field="name") from None
    if expect_name is not None and spec.name != expect_name:
        raise entry.error(f"recipe {spec.name!r} must live in {spec.name}.yaml", "name")
    return entry


def _check_entry(catalog: Catalog, entry: RecipeEntry) -> None:
    spec = entry.spec
    if entry.kind == "mixin":
        for key, empty in (
            ("base", not spec.base),
            ("mixins", not spec.mixins),
            ("criteria", spec.criteria == Criteria()),
        ):
            if not empty:
                raise entry.error(f"a mixin cannot set {key}", key)
    else:
        spec.criteria = catalog.criteria.normalize(
            spec.criteria, file=entry.file, line=entry.line("criteria")
        )
    if spec.base and spec.base not in catalog.overlays:
        raise entry.error(f"unknown base recipe {spec.base!r}", "base")
    for index, mixin in enumerate(spec.mixins):
        if mixin not in catalog.mixins:
            raise entry.error(f"unknown mixin {mixin!r} (mixins live in mixins/)", "mixins", index)
    _check_constraints(entry, spec.constraints, ("constraints",))
    _check_unique(entry, [c.name for c in spec.components], ("components",))
    for phase in PHASES:
        spec_phase = getattr(spec.validation, phase)
        if spec_phase is UNSET:
            continue
        where = ("validation", phase)
        _check_constraints(entry, spec_phase.constraints, (*where, "constraints"))
        _check_unique(entry, [c.name for c in spec_phase.checks], (*where, "checks"))
        for index, check in enumerate(spec_phase.checks):
            at = (*where, "checks", index)
            known = catalog.checks.get(check.name)
            if known is None:
                raise entry.error(
                    f"unknown check {check.name!r}; known: {', '.join(catalog.checks)}", *at, "name"
                )
            if known.phase != phase:
                raise entry.error(
                    f"check {check.name!r} belongs to phase {known.phase!r}", *at, "name"
                )
            if check.timeout is not UNSET:
                try:
                    parse_duration(check.timeout)
                except InvalidInput as exc:
                    raise entry.error(exc.message, *at, "timeout") from None


def _check_constraints(
    entry: RecipeEntry, constraints: list[ConstraintSpec], where: tuple[str, ...]
) -> None:
    _check_unique(entry, [c.name for c in constraints], where)
    for index, constraint in enumerate(constraints):
        if not constraint.name.strip():
            raise entry.error("a constraint needs a name", *where, index, "name")
        if constraint.value is UNSET:
            continue
        try:
            parse_expression(constraint.value)
        except ExpressionError as exc:
            raise entry.error(
                f"bad expression {constraint.value!r}: {exc}", *where, index, "value"
            ) from None


def _check_unique(entry: RecipeEntry, names: list[str], where: tuple[str, ...]) -> None:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            raise entry.error(f"{name!r} is listed twice", *where, index, "name")
        seen.add(name)
