"""Resolving a query over an AICR catalog the way `aicr recipe` does (newest documented rules).

1. Match: an overlay applies when every criteria field it sets equals the query's; a field
   it leaves empty or "any" matches every query value, while a query's "any" matches only
   overlays that are "any" there too (`nodes`: 0 is "any"). Matches are ordered by
   specificity (fields set), ascending, ties by name.
2. Merge: start from base.yaml; for each match, its base chain from the root down, each
   recipe once. Then the mixins the applied overlays name, each once, in the order named.
   With readings (a snapshot), a match whose own constraints fail is excluded first
   (`constraint-failed`), and so is one whose chain names a mixin whose constraints fail
   (`mixin-constraint-failed`, AICR's scoped fallback): only that match, not the others.
3. Merge rules (`merge_spec`): constraints replace by name; componentRefs merge field by
   field (a non-empty field wins; `overrides` deep-merge; `manifestFiles` append without
   duplicates; `dependencyRefs`, `patches`, `expectedResources` replace when given);
   validation phases replace whole.
4. Check: every dependencyRef names a component of the result, and there is no cycle.
5. `deploymentOrder`: a topological order, always taking the ready component with the
   smallest name; registry defaults then fill type, source, chart, version and namespace.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from cairn.errors import InvalidInput
from cairn.recipes.aicr.catalog import BASE, AicrCatalog
from cairn.recipes.aicr.model import (
    ANY,
    API_VERSION,
    CRITERIA_FIELDS,
    PHASES,
    AicrConstraint,
    AicrCriteria,
    ComponentRef,
    ConstraintWarning,
    ExcludedOverlay,
    RecipeMetadata,
    RecipeResult,
    ResultMetadata,
    Validation,
)

_ALIASES: dict[str, dict[str, str]] = {
    "service": {"self-managed": ANY, "self": ANY, "vanilla": ANY},
    "os": {"al2": "amazonlinux", "al2023": "amazonlinux"},
}

KNOWN_VALUES: dict[str, tuple[str, ...]] = {
    "service": ("aks", "bcm", "eks", "generic", "gke", "k0s", "kind", "lke", "metal3", "ocp",
                "oke", "rke2"),
    "accelerator": ("a100", "b200", "gb200", "gb300", "h100", "h200", "l40", "l40s",
                    "rtx-pro-6000", "vr200"),
    "os": ("amazonlinux", "cos", "ol", "rhel", "sles", "talos", "ubuntu"),
    "intent": ("inference", "training"),
    "platform": ("dynamo", "kubeflow", "kueue", "nim", "runai", "slurm"),
}
"""AICR's published criteria values; overlays in the data add their own (AICR's criteria
registry), so a query may use either, and nothing else."""

ConstraintJudge = Callable[[AicrConstraint], tuple[bool, str]]
"""Judges one constraint against readings: (holds, what was read or why it cannot be)."""


def normalize(criteria: AicrCriteria) -> AicrCriteria:
    """Lower-case every field, "" -> "any", AICR's aliases applied."""
    fields = {}
    for name in CRITERIA_FIELDS:
        value = (getattr(criteria, name) or ANY).strip().lower() or ANY
        fields[name] = _ALIASES.get(name, {}).get(value, value)
    if criteria.nodes < 0:
        raise InvalidInput("nodes must be 0 (any) or more", field="criteria.nodes")
    return AicrCriteria(nodes=criteria.nodes, **fields)


def specificity(criteria: AicrCriteria | None) -> int:
    if criteria is None:
        return 0
    c = normalize(criteria)
    fields: int = sum(getattr(c, f) != ANY for f in CRITERIA_FIELDS)
    return fields + (c.nodes != 0)


def matches(recipe: AicrCriteria, query: AicrCriteria) -> bool:
    """AICR's asymmetric wildcard rule (both sides normalised)."""
    for name in CRITERIA_FIELDS:
        have = getattr(recipe, name)
        if have != ANY and have != getattr(query, name):
            return False
    return recipe.nodes == 0 or recipe.nodes == query.nodes


def check_query(catalog: AicrCatalog, query: AicrCriteria) -> AicrCriteria:
    """`query` normalised, each value one AICR publishes or one an overlay of the data uses.

    Raises:
        InvalidInput: an unknown value, listing the allowed ones.
    """
    q = normalize(query)
    for name in CRITERIA_FIELDS:
        value = getattr(q, name)
        if value == ANY:
            continue
        used = {getattr(normalize(o.spec.criteria), name) for o in catalog.overlays.values()
                if o.spec.criteria is not None}
        allowed = sorted((set(KNOWN_VALUES[name]) | used) - {ANY})
        if value not in allowed:
            raise InvalidInput(f"unknown {name} {value!r}; allowed: any, {', '.join(allowed)}",
                               field=f"criteria.{name}")
    return q


def match(catalog: AicrCatalog, query: AicrCriteria) -> list[str]:
    """Names of the overlays that apply to `query` (base aside), in application order."""
    q = check_query(catalog, query)
    found = [(specificity(o.spec.criteria), name) for name, o in catalog.overlays.items()
             if name != BASE and o.spec.criteria is not None
             and matches(normalize(o.spec.criteria), q)]
    return [name for _, name in sorted(found)]


def resolve(catalog: AicrCatalog, query: AicrCriteria,
            judge: ConstraintJudge | None = None) -> RecipeResult:
    """The `RecipeResult` for `query` (see the module docstring).

    Raises:
        InvalidInput: a dependencyRef to a component the result does not hold, or a
            dependency cycle (naming the component).
    """
    q = check_query(catalog, query)
    matched = match(catalog, q)
    excluded: list[ExcludedOverlay] = []
    warnings: list[ConstraintWarning] = []
    if judge is not None:
        kept = []
        for name in matched:
            failed = _failed_constraints(name, catalog.overlays[name].spec.constraints, judge)
            reason = "constraint-failed"
            if not failed:
                reason = "mixin-constraint-failed"
                for mixin in _chain_mixins(catalog, name):
                    failed += _failed_constraints(name, catalog.mixins[mixin].spec.constraints,
                                                  judge)
            if failed:
                excluded.append(ExcludedOverlay(name=name, reason=reason))
                warnings += failed
            else:
                kept.append(name)
        matched = kept
    merged = _Spec()
    merged.apply(catalog.base)
    applied = [BASE]
    for name in matched:
        for link in catalog.chain(name):
            if link not in applied:
                merged.apply(catalog.overlays[link])
                applied.append(link)
    mixins: list[str] = []
    for name in applied:
        for mixin in catalog.overlays[name].spec.mixins:
            if mixin not in mixins:
                mixins.append(mixin)
                spec = catalog.mixins[mixin].spec
                merged.merge_parts(spec.constraints, spec.component_refs, None)
    refs = sorted(merged.refs.values(), key=lambda r: r.name)
    order = deployment_order(refs)
    refs = [with_registry_defaults(ref, catalog) for ref in refs]
    return RecipeResult(
        kind="RecipeResult", api_version=API_VERSION,
        metadata=ResultMetadata(applied_overlays=applied, applied_mixins=mixins,
                                excluded_overlays=excluded, constraint_warnings=warnings),
        criteria=q,
        constraints=sorted(merged.constraints.values(), key=lambda c: c.name),
        component_refs=refs, deployment_order=order, validation=merged.validation())


def _chain_mixins(catalog: AicrCatalog, name: str) -> list[str]:
    """The mixins `name`'s chain (base included) names, in order, each once."""
    out: list[str] = []
    for link in [BASE, *catalog.chain(name)]:
        out += [m for m in catalog.overlays[link].spec.mixins if m not in out]
    return out


def _failed_constraints(name: str, constraints: list[AicrConstraint],
                        judge: ConstraintJudge) -> list[ConstraintWarning]:
    out = []
    for constraint in constraints:
        holds, actual = judge(constraint)
        if not holds:
            out.append(ConstraintWarning(
                overlay=name, constraint=constraint.name, expected=constraint.value,
                actual=actual, reason=f"expected {constraint.value}, got {actual or 'nothing'}"))
    return out


class _Spec:
    """The spec being merged: constraints and refs by name, validation phases."""

    def __init__(self) -> None:
        self.constraints: dict[str, AicrConstraint] = {}
        self.refs: dict[str, ComponentRef] = {}
        self.phases: dict[str, Any] = {}

    def apply(self, overlay: RecipeMetadata) -> None:
        spec = overlay.spec
        self.merge_parts(spec.constraints, spec.component_refs, spec.validation)

    def merge_parts(self, constraints: list[AicrConstraint], refs: list[ComponentRef],
                    validation: Validation | None) -> None:
        for constraint in constraints:
            self.constraints[constraint.name] = constraint
        for ref in refs:
            have = self.refs.get(ref.name)
            self.refs[ref.name] = copy.deepcopy(ref) if have is None else merge_ref(have, ref)
        if validation is not None:
            for phase in PHASES:
                declared = getattr(validation, phase)
                if declared is not None:
                    self.phases[phase] = declared

    def validation(self) -> Validation | None:
        return Validation(**self.phases) if self.phases else None


def merge_ref(base: ComponentRef, upper: ComponentRef) -> ComponentRef:
    """`upper` on top of `base`, field by field (AICR's `mergeComponentRef`)."""
    fields = msgspec.structs.asdict(base)
    for key in ("namespace", "chart", "type", "source", "version", "tag", "values_file",
                "path", "health_check_asserts"):
        if getattr(upper, key):
            fields[key] = getattr(upper, key)
    if upper.overrides:
        fields["overrides"] = deep_merge(copy.deepcopy(base.overrides), upper.overrides)
    for key in ("patches", "dependency_refs", "expected_resources"):
        if getattr(upper, key):
            fields[key] = copy.deepcopy(getattr(upper, key))
    fields["manifest_files"] = [*base.manifest_files,
                                *(m for m in upper.manifest_files if m not in base.manifest_files)]
    fields["cleanup"] = base.cleanup or upper.cleanup
    return ComponentRef(**fields)


def deep_merge(target: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `update` into `target`: mappings key by key, anything else replaces."""
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            deep_merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def deployment_order(refs: list[ComponentRef]) -> list[str]:
    """Kahn's order, smallest ready name first (AICR's `TopologicalSort`).

    Raises:
        InvalidInput: an unknown dependency or a cycle.
    """
    names = {r.name for r in refs}
    for ref in refs:
        for dep in ref.dependency_refs:
            if dep not in names:
                raise InvalidInput(f"component {ref.name!r} depends on {dep!r}, which the "
                                   "merged recipe does not hold",
                                   field=f"componentRefs.{ref.name}.dependencyRefs")
    waiting = {r.name: len(set(r.dependency_refs)) for r in refs}
    dependents: dict[str, list[str]] = {}
    for ref in refs:
        for dep in set(ref.dependency_refs):
            dependents.setdefault(dep, []).append(ref.name)
    ready = [name for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        name = heapq.heappop(ready)
        order.append(name)
        for dependent in dependents.get(name, []):
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                heapq.heappush(ready, dependent)
    if len(order) != len(refs):
        stuck = sorted(n for n in waiting if n not in order)
        raise InvalidInput("dependency cycle among " + ", ".join(stuck),
                           field=f"componentRefs.{stuck[0]}.dependencyRefs")
    return order


def with_registry_defaults(ref: ComponentRef, catalog: AicrCatalog) -> ComponentRef:
    """Fill what the ref leaves empty from the registry (AICR's `ApplyRegistryDefaults`)."""
    entry = catalog.registry.get(ref.name)
    if entry is None:
        return ref
    fields: dict[str, Any] = {"type": ref.type or entry.type}
    if fields["type"] == "Helm" and entry.helm is not None:
        helm = entry.helm
        fields.update(source=ref.source or helm.default_repository,
                      version=ref.version or helm.default_version,
                      namespace=ref.namespace or helm.default_namespace,
                      chart=ref.chart or helm.default_chart.rsplit("/", 1)[-1])
    elif fields["type"] == "Kustomize" and entry.kustomize is not None:
        k = entry.kustomize
        fields.update(source=ref.source or k.default_source, tag=ref.tag or k.default_tag,
                      path=ref.path or k.default_path)
    return msgspec.structs.replace(ref, **fields)
