"""Resolving a recipe: merge the base chain, mixins and overlays, remembering who set what.

Order of application for one recipe: its base chain from the root down, each link preceded by
its mixins, so a recipe's own values win over its mixins and its bases. For a query, the
matched overlays are expanded that way in match order and a recipe already applied is not
applied again. Later files override earlier ones: scalars are replaced, constraints,
components and checks merge by name field by field, and `values`/`with` mappings deep-merge.
Every value set is recorded with its file, for `cairn recipe explain`.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from cairn.errors import InvalidInput, NotFound
from cairn.recipes.catalog import Catalog, RecipeEntry
from cairn.recipes.matching import match
from cairn.recipes.model import (
    PHASES,
    Check,
    Component,
    Constraint,
    ConstraintSpec,
    Criteria,
    PhaseChecks,
    Provenance,
    Recipe,
)

Path = tuple[str, ...]


def base_chain(catalog: Catalog, name: str) -> list[str]:
    """`name` and its bases, root first.

    Raises:
        InvalidInput: the chain loops ("base cycle: a -> b -> a").
        NotFound: `name` is not in the catalog.
    """
    chain: list[str] = []
    current = name
    while current:
        if current in chain:
            loop = [*chain[chain.index(current) :], current]
            entry = catalog.get(name)
            raise InvalidInput(
                "base cycle: " + " -> ".join(loop),
                file=entry.file,
                line=entry.line("base"),
                field="base",
            )
        chain.append(current)
        current = catalog.get(current).spec.base
    return chain[::-1]


def application_order(catalog: Catalog, names: list[str]) -> list[str]:
    """Recipes to merge for `names` (overlays in match order), each once, first wins."""
    out: list[str] = []
    for name in names:
        for link in base_chain(catalog, name):
            for mixin in catalog.get(link).spec.mixins:
                if mixin not in out:
                    out.append(mixin)
            if link not in out:
                out.append(link)
    return out


def resolve(catalog: Catalog, target: str | Criteria) -> Recipe:
    """Resolve a recipe by name, or by query (the most specific match names the result).

    Raises:
        NotFound: no recipe of that name, or nothing matches the query.
        InvalidInput: a bad query value, a base cycle, or a constraint left without a value.
    """
    if isinstance(target, str):
        entry = catalog.get(target)
        if entry.kind == "mixin":
            raise InvalidInput(f"{target!r} is a mixin; resolve an overlay", field="recipe")
        names, criteria, title = [target], entry.spec.criteria, target
    else:
        matched = match(catalog, target)
        if not matched:
            raise NotFound("no recipe matches the query", field="criteria")
        names = [m.name for m in matched]
        criteria = catalog.criteria.normalize(target, where="query")
        title = names[-1]
    merger = _Merger()
    order = application_order(catalog, names)
    for name in order:
        merger.apply(catalog.get(name))
    return merger.result(catalog, title, criteria, order)


class _Merger:
    def __init__(self) -> None:
        self.description = ""
        self.constraints: dict[str, dict[str, Any]] = {}
        self.components: dict[str, dict[str, Any]] = {}
        self.phases: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        self.provenance: dict[Path, tuple[Any, str]] = {}

    def _set(self, target: dict[str, Any], key: str, value: Any, path: Path, file: str) -> None:
        if isinstance(value, dict) and key in ("values", "with"):
            self._deep(target.setdefault(key, {}), value, (*path, key), file)
            return
        target[key] = value
        self.provenance[(*path, key)] = (value, file)

    def _deep(self, target: dict[str, Any], value: dict[str, Any], path: Path, file: str) -> None:
        for key in sorted(value, key=str):
            item, sub = value[key], (*path, str(key))
            nested = isinstance(item, dict) and bool(item)
            if not (nested and isinstance(target.get(key), dict)):
                # A replaced subtree's old leaves no longer describe the value.
                for old in [p for p in self.provenance if p[: len(sub)] == sub]:
                    del self.provenance[old]
                target[key] = {} if nested else item
            if nested:
                self._deep(target[key], item, sub, file)
            else:
                self.provenance[sub] = (item, file)

    def _merge_named(
        self, into: dict[str, dict[str, Any]], items: list[Any], path: Path, file: str
    ) -> None:
        for item in items:
            fields = msgspec.structs.asdict(item)
            slot = into.setdefault(item.name, {"name": item.name})
            for key, value in fields.items():
                if key == "name" or value is UNSET:
                    continue
                self._set(slot, "with" if key == "with_" else key, value, (*path, item.name), file)

    def apply(self, entry: RecipeEntry) -> None:
        spec, file = entry.spec, entry.file
        if spec.description:
            self.description = spec.description
            self.provenance[("description",)] = (spec.description, file)
        self._merge_named(self.constraints, spec.constraints, ("constraints",), file)
        self._merge_named(self.components, spec.components, ("components",), file)
        for phase in PHASES:
            declared = getattr(spec.validation, phase)
            if declared is UNSET:
                continue
            slot = self.phases.setdefault(phase, {"checks": {}, "constraints": {}})
            where: Path = ("validation", phase)
            self._merge_named(slot["checks"], declared.checks, (*where, "checks"), file)
            self._merge_named(
                slot["constraints"], declared.constraints, (*where, "constraints"), file
            )

    def result(self, catalog: Catalog, name: str, criteria: Criteria, order: list[str]) -> Recipe:
        components = [
            msgspec.convert(c, Component)
            for _, c in sorted(self.components.items())
            if c.pop("enabled", True)
        ]
        validation: dict[str, PhaseChecks] = {}
        for phase in PHASES:
            if phase not in self.phases:
                continue
            checks = []
            for check_name, check in sorted(self.phases[phase]["checks"].items()):
                check.setdefault("timeout", catalog.checks[check_name].timeout)
                checks.append(msgspec.convert(check, Check))
            validation[phase] = PhaseChecks(
                checks=checks, constraints=_constraints(self.phases[phase]["constraints"], order)
            )
        provenance = [
            Provenance(path=list(p), value=v, file=f)
            for p, (v, f) in sorted(self.provenance.items())
        ]
        return Recipe(
            name=name,
            description=self.description,
            criteria=criteria,
            applied=order,
            constraints=_constraints(self.constraints, order),
            components=components,
            validation=validation,
            provenance=provenance,
        )


def _constraints(raw: dict[str, dict[str, Any]], order: list[str]) -> list[Constraint]:
    out = []
    for name, fields in sorted(raw.items()):
        if "value" not in fields:
            raise InvalidInput(
                f"constraint {name!r} has no value after merging {', '.join(order)}",
                field="constraints",
            )
        out.append(msgspec.convert(fields, Constraint))
    return out


def query_value(recipe: Recipe, path: str) -> Any:
    """One resolved value by dotted path, e.g. `components.gpu-operator.version`.

    Named items (constraints, components, checks) are addressed by name, and names may hold
    dots (`constraints.K8s.server.version.value`): the longest name that fits wins.

    Raises:
        NotFound: nothing at that path.
    """
    node: Any = msgspec.to_builtins(recipe)
    node.pop("provenance", None)
    rest = path.strip(".")
    while rest:
        node, rest = _step(node, rest, path)
    return node


def _step(node: Any, rest: str, path: str) -> tuple[Any, str]:
    keys: dict[str, Any] = {}
    if isinstance(node, dict):
        keys = {str(k): v for k, v in node.items()}
    elif isinstance(node, list) and all(isinstance(i, dict) and "name" in i for i in node):
        keys = {str(i["name"]): i for i in node}
    elif isinstance(node, list):
        keys = {str(i): v for i, v in enumerate(node)}
    for key in sorted(keys, key=len, reverse=True):
        if rest == key:
            return keys[key], ""
        if rest.startswith(key + "."):
            return keys[key], rest[len(key) + 1 :]
    raise NotFound(f"no value at {path!r} (stuck at {rest!r})", field="path")


def constraint_from_spec(spec: ConstraintSpec) -> Constraint:
    """A standalone constraint (tests, tools): unset fields take their defaults."""
    fields = {k: v for k, v in msgspec.structs.asdict(spec).items() if v is not UNSET}
    return msgspec.convert(fields, Constraint)
