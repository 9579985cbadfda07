"""Between Cairn's recipes and AICR's shapes.

- `cairn_data(catalog)`: Cairn's catalog as AICR data files, the lower layer `--data`
  lies on. Only Kubernetes recipes (scheduler `any` or `kubernetes`) are carried: AICR has no
  Docker or Slurm recipes. A component's chart, repository and namespace become its registry
  entry; its version and values the componentRef's `version` and `overrides`.
- `result_of(recipe)`: a resolved Cairn recipe as a `RecipeResult`.
- `read_recipe_file(path)`: a `RecipeResult` file, or a resolved Cairn recipe as `cairn recipe
  show -o yaml|json` writes it, as a `RecipeResult`.
- `constraints_of(result)`: its constraints as Cairn's, for the offline verdict.
- `component_values(ref, files)`: the values a component deploys with (AICR's rule: the
  component's `values.yaml`, then its `valuesFile` when that is another file, then
  `overrides`, deep-merged).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import yaml

from cairn import files, yamlfile
from cairn.errors import InvalidInput
from cairn.recipes.aicr.datadir import (
    MAX_FILE_BYTES,
    DataFiles,
    checked_name,
    data_path,
    parse_yaml,
)
from cairn.recipes.aicr.model import (
    ANY,
    API_VERSION,
    API_VERSIONS,
    CRITERIA_FIELDS,
    PHASES,
    AicrConstraint,
    AicrCriteria,
    ComponentRef,
    HelmDefaults,
    RecipeResult,
    RegistryEntry,
    ResultMetadata,
    Validation,
    ValidationPhase,
    to_document,
)
from cairn.recipes.aicr.resolve import deep_merge, deployment_order
from cairn.recipes.catalog import Catalog, RecipeEntry
from cairn.recipes.model import Constraint, Criteria, Recipe

CAIRN_ORIGIN = "cairn-catalog"


def _criteria(criteria: Criteria) -> dict[str, Any]:
    out: dict[str, Any] = {f: getattr(criteria, f) for f in CRITERIA_FIELDS
                           if getattr(criteria, f) != ANY}
    if criteria.nodes:
        out["nodes"] = criteria.nodes
    return out


def _is_kubernetes(entry: RecipeEntry) -> bool:
    return entry.spec.criteria.scheduler in (ANY, "kubernetes")


def cairn_data(catalog: Catalog) -> DataFiles:
    """Cairn's Kubernetes recipes as AICR data (see the module docstring)."""
    data = DataFiles()
    kept = {name for name, e in catalog.overlays.items() if _is_kubernetes(e)}
    for name in sorted(kept):
        entry = catalog.overlays[name]
        spec = entry.spec
        rel = "overlays/base.yaml" if name == "base" else f"overlays/{name}.yaml"
        body: dict[str, Any] = {}
        if spec.base and spec.base in kept:
            body["base"] = spec.base
        if name != "base":
            body["criteria"] = _criteria(spec.criteria)
        if spec.mixins:
            body["mixins"] = list(spec.mixins)
        body.update(_body(entry, data))
        _add(data, rel, {"kind": "RecipeMetadata", "apiVersion": API_VERSION,
                         "metadata": {"name": name}, "spec": body}, entry.file)
    for name, entry in catalog.mixins.items():
        body = _body(entry, data)
        body.pop("validation", None)
        _add(data, f"mixins/{name}.yaml", {"kind": "RecipeMixin", "apiVersion": API_VERSION,
                                           "metadata": {"name": name}, "spec": body},
             entry.file)
    return data


def _add(data: DataFiles, rel: str, doc: dict[str, Any], source: str) -> None:
    data.files[rel] = yaml.safe_dump(doc, sort_keys=False).encode()
    data.origin[rel] = f"{CAIRN_ORIGIN}:{source}"


def _body(entry: RecipeEntry, data: DataFiles) -> dict[str, Any]:
    spec = entry.spec
    body: dict[str, Any] = {}
    if spec.constraints:
        body["constraints"] = [_constraint_doc(c) for c in spec.constraints]
    refs = []
    for component in spec.components:
        ref: dict[str, Any] = {"name": component.name, "type": "Helm"}
        fields = msgspec.structs.asdict(component)
        if isinstance(fields["version"], str):
            ref["version"] = fields["version"]
        if isinstance(fields["values"], dict):
            ref["overrides"] = copy.deepcopy(fields["values"])
        if fields["enabled"] is False:
            ref.setdefault("overrides", {})["enabled"] = False
        if isinstance(fields["dependencies"], list):
            ref["dependencyRefs"] = list(fields["dependencies"])
        if isinstance(fields["namespace"], str):
            ref["namespace"] = fields["namespace"]
        refs.append(ref)
        if isinstance(fields["chart"], str) and component.name not in data.registry:
            data.registry[component.name] = RegistryEntry(name=component.name, helm=HelmDefaults(
                default_repository=fields["repository"] if isinstance(fields["repository"], str)
                else "", default_chart=fields["chart"],
                default_namespace=fields["namespace"] if isinstance(fields["namespace"], str)
                else ""))
            data.registry_origin[component.name] = f"{CAIRN_ORIGIN}:{entry.file}"
    if refs:
        body["componentRefs"] = refs
    phases: dict[str, Any] = {}
    for phase in PHASES:
        declared = getattr(spec.validation, phase)
        if declared is msgspec.UNSET:
            continue
        phases[phase] = {"checks": [c.name for c in declared.checks],
                         "constraints": [_constraint_doc(c) for c in declared.constraints]}
    if phases:
        body["validation"] = phases
    return body


def _constraint_doc(spec: Any) -> dict[str, Any]:
    doc = {"name": spec.name}
    for key in ("value", "severity", "remediation"):
        value = getattr(spec, key)
        if isinstance(value, str) and value:
            doc[key] = value
    return doc


def result_of(recipe: Recipe) -> RecipeResult:
    """A resolved Cairn recipe as AICR's `RecipeResult` (check parameters have no place in
    AICR's shape and are left out)."""
    present = {c.name for c in recipe.components}
    refs = [ComponentRef(name=c.name, type="Helm", chart=c.chart.rsplit("/", 1)[-1],
                         source=c.repository, version=c.version, namespace=c.namespace,
                         overrides=copy.deepcopy(c.values),
                         dependency_refs=sorted(d for d in set(c.dependencies) if d in present))
            for c in recipe.components]
    phases = {phase: ValidationPhase(
        checks=[c.name for c in body.checks],
        constraints=[_aicr_constraint(c) for c in body.constraints])
        for phase, body in recipe.validation.items() if phase in PHASES}
    criteria = msgspec.convert(_criteria(recipe.criteria), AicrCriteria)
    return RecipeResult(
        kind="RecipeResult", api_version=API_VERSION,
        metadata=ResultMetadata(applied_overlays=list(recipe.applied)),
        criteria=criteria, constraints=[_aicr_constraint(c) for c in recipe.constraints],
        component_refs=refs, deployment_order=deployment_order(refs),
        validation=Validation(**phases) if phases else None)


def _aicr_constraint(c: Constraint) -> AicrConstraint:
    return AicrConstraint(name=c.name, value=c.value, remediation=c.remediation,
                          severity="" if c.severity == "error" else c.severity)


def read_recipe_file(path: Path) -> RecipeResult:
    """A recipe file as a `RecipeResult` (see `read_recipe_source`)."""
    return read_recipe_source(path)[0]


def read_recipe_source(path: Path) -> tuple[RecipeResult, str]:
    """A recipe file: AICR's `RecipeResult` or Cairn's resolved recipe (YAML or JSON), and
    which of the two it was (`"aicr"` or `"cairn"`).

    Raises:
        InvalidInput: not a recipe file, a wrong kind or apiVersion, or malformed (naming the
            file and field).
    """
    shown = str(path)
    doc = parse_yaml(files.read_bytes(path, limit=MAX_FILE_BYTES, shown=shown), shown)
    data = doc.data
    if not isinstance(data, dict):
        raise InvalidInput("expected a recipe: a RecipeResult document or a resolved Cairn "
                           "recipe (cairn recipe show -o yaml)", file=shown)
    if "kind" in data or "apiVersion" in data:
        if data.get("kind") != "RecipeResult":
            raise InvalidInput(f"kind is {data.get('kind')!r}, expected 'RecipeResult'",
                               file=shown, line=doc.line_of(("kind",)), field="kind")
        if data.get("apiVersion") not in API_VERSIONS:
            raise InvalidInput(f"unknown apiVersion {data.get('apiVersion')!r}; known: "
                               f"{', '.join(API_VERSIONS)}", file=shown,
                               line=doc.line_of(("apiVersion",)), field="apiVersion")
        meta = data.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("excludedOverlays"), list):
            # AICR before its structured exclusions wrote plain names.
            meta["excludedOverlays"] = [{"name": e} if isinstance(e, str) else e
                                        for e in meta["excludedOverlays"]]
        result = yamlfile.convert(doc, RecipeResult)
        for index, ref in enumerate(result.component_refs):
            checked_name(ref.name, "component", file=shown,
                         field_name=f"componentRefs[{index}].name")
            for key, paths in (("valuesFile", [ref.values_file] if ref.values_file else []),
                               ("manifestFiles", ref.manifest_files)):
                for value in paths:
                    data_path(value, file=shown, field_name=f"componentRefs[{index}].{key}")
        try:
            deployment_order(result.component_refs)  # refuses unknown dependencies, cycles
        except InvalidInput as exc:
            raise InvalidInput(exc.message.replace("the merged recipe", "the recipe"),
                               file=shown, field=exc.field) from None
        return result, "aicr"
    if "components" in data and "applied" in data:
        return result_of(yamlfile.convert(doc, Recipe)), "cairn"
    raise InvalidInput("not a recipe: no kind: RecipeResult, and not a resolved Cairn recipe "
                       "(name, applied, components)", file=shown)


def constraints_of(result: RecipeResult, phase: str | None = None) -> list[Constraint]:
    """The recipe's snapshot constraints (phase None), or one validation phase's."""
    if phase is None:
        source = result.constraints
    else:
        declared = getattr(result.validation, phase) if result.validation else None
        source = declared.constraints if declared is not None else []
    return [Constraint(name=c.name, value=c.value, remediation=c.remediation,
                       severity="warning" if c.severity.lower() == "warning" else "error",
                       source=c.unit and f"unit {c.unit}")
            for c in source]


def component_values(ref: ComponentRef, files: Mapping[str, bytes] | None,
                     shown: str = "recipe") -> dict[str, Any]:
    """The values `ref` deploys with (see the module docstring).

    Raises:
        InvalidInput: the ref names a values file that `files` does not hold, or one that is
            not a mapping.
    """
    values: dict[str, Any] = {}
    if ref.values_file:
        base = f"components/{ref.name}/values.yaml"
        chain = [base, ref.values_file] if ref.values_file != base else [base]
        for index, rel in enumerate(chain):
            content = files.get(rel) if files is not None else None
            if content is None:
                if index == 0 and len(chain) == 2:
                    continue  # AICR: a missing base values file is an empty one
                raise InvalidInput(f"values file {rel!r} is not in the recipe data (give the "
                                   "data directory it comes from with --data DIR)",
                                   file=shown, field=f"componentRefs.{ref.name}.valuesFile")
            loaded = parse_yaml(content, rel).data
            if loaded is None:
                continue
            if not isinstance(loaded, dict):
                raise InvalidInput("a values file must be a mapping", file=rel)
            deep_merge(values, loaded)
    if ref.overrides:
        deep_merge(values, ref.overrides)
    return values


def result_document(result: RecipeResult) -> dict[str, Any]:
    """The `RecipeResult` as written: componentRefs and deploymentOrder always present."""
    doc = to_document(result)
    doc.setdefault("componentRefs", [])
    doc.setdefault("deploymentOrder", [])
    return doc
