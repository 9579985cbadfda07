"""`cairn recipe import DIR`: an AICR data directory as a Cairn catalog, and what did not fit.

What maps one to one: overlays (name, base, criteria, mixins, constraints, validation checks
and constraints), mixins, component chart, repository, version, namespace, dependencies and
`overrides.enabled: false`, values files and overrides (as `values`), and the validator
catalog (as checks.yaml). Every overlay without a base gets `base: base`, since AICR applies
base.yaml under every recipe.

What does not fit is listed, one line each, naming file and field: manifests, Kustomize
components, patches, expected resources and health-check asserts, constraint units, phase
timeouts and node selection, and values whose AICR precedence Cairn's merge cannot express
(a `valuesFile` replaced further down a chain: AICR reads only the last one, Cairn merges
both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cairn.recipes.aicr.catalog import BASE, AicrCatalog
from cairn.recipes.aicr.convert import component_values
from cairn.recipes.aicr.model import (
    ANY,
    CRITERIA_FIELDS,
    PHASES,
    AicrConstraint,
    ComponentRef,
    RecipeMetadata,
)
from cairn.recipes.aicr.resolve import normalize


@dataclass
class Imported:
    """The Cairn catalog's files (relative path -> text) and what could not be carried."""

    files: dict[str, str] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)


def import_catalog(catalog: AicrCatalog) -> Imported:
    out = Imported()
    seen: dict[str, set[str]] = {f: set() for f in CRITERIA_FIELDS}
    used_checks: dict[str, str] = {}
    for name in sorted(catalog.overlays):
        overlay = catalog.overlays[name]
        body = _overlay(catalog, name, overlay, out, used_checks)
        for key, value in body.get("criteria", {}).items():
            if key in seen:
                seen[key].add(value)
        out.files[f"overlays/{name}.yaml"] = _yaml(body)
    for name in sorted(catalog.mixins):
        mixin = catalog.mixins[name]
        file = catalog.file_of(name)
        body = {"name": name, "description": f"Imported from AICR {file}"}
        constraints = [_constraint(c, file, "spec.constraints", out) for c in
                       mixin.spec.constraints]
        if constraints:
            body["constraints"] = constraints
        components = [_component(catalog, r, file, out, first=False)
                      for r in mixin.spec.component_refs]
        if components:
            body["components"] = components
        out.files[f"mixins/{name}.yaml"] = _yaml(body)
    out.files["criteria.yaml"] = _yaml(_criteria_file(seen))
    out.files["checks.yaml"] = _yaml(_checks_file(catalog, used_checks, out))
    return out


def _yaml(data: Any) -> str:
    return "# Imported from AICR recipe data by `cairn recipe import`.\n" + yaml.safe_dump(
        data, sort_keys=False)


def _overlay(catalog: AicrCatalog, name: str, overlay: RecipeMetadata, out: Imported,
             used_checks: dict[str, str]) -> dict[str, Any]:
    file = catalog.file_of(name)
    spec = overlay.spec
    body: dict[str, Any] = {"name": name, "description": f"Imported from AICR {file}"}
    if name != BASE:
        body["base"] = spec.base or BASE
        criteria = normalize(spec.criteria) if spec.criteria is not None else None
        if criteria is not None:
            body["criteria"] = {f: getattr(criteria, f) for f in CRITERIA_FIELDS
                                if getattr(criteria, f) != ANY}
            if criteria.nodes:
                body["criteria"]["nodes"] = criteria.nodes
    if spec.mixins:
        body["mixins"] = list(spec.mixins)
    if spec.constraints:
        body["constraints"] = [_constraint(c, file, "spec.constraints", out)
                               for c in spec.constraints]
    ancestors = _declared_before(catalog, name)
    components = []
    for ref in spec.component_refs:
        components.append(_component(catalog, ref, file, out,
                                     first=ref.name not in ancestors))
        if ref.values_file and ancestors.get(ref.name, "") not in ("", ref.values_file):
            out.lost.append(f"{file}: componentRefs.{ref.name}.valuesFile: replaces "
                            f"{ancestors[ref.name]}; AICR reads only the last values file, "
                            "Cairn merges both (keys only the earlier file sets remain)")
    if components:
        body["components"] = components
    validation: dict[str, Any] = {}
    for phase in PHASES:
        declared = getattr(spec.validation, phase) if spec.validation else None
        if declared is None:
            continue
        at = f"spec.validation.{phase}"
        for key, value in (("timeout", declared.timeout), ("nodeSelection",
                                                            declared.node_selection),
                           ("infrastructure", declared.infrastructure)):
            if value:
                out.lost.append(f"{file}: {at}.{key}: Cairn's phases have no {key}; "
                                "not carried over")
        for check in declared.checks:
            used_checks.setdefault(check, phase)
        validation[phase] = {
            "checks": [{"name": c} for c in declared.checks],
            "constraints": [_constraint(c, file, f"{at}.constraints", out)
                            for c in declared.constraints]}
    if validation:
        body["validation"] = validation
    return body


def _declared_before(catalog: AicrCatalog, name: str) -> dict[str, str]:
    """Components declared by `name`'s ancestors (base included): name -> last valuesFile."""
    if name == BASE:
        return {}
    out: dict[str, str] = {}
    for link in [BASE, *catalog.chain(name)[:-1]]:
        for ref in catalog.overlays[link].spec.component_refs:
            out[ref.name] = ref.values_file or out.get(ref.name, "")
    return out


def _constraint(c: AicrConstraint, file: str, at: str, out: Imported) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": c.name, "value": c.value}
    severity = c.severity.lower()
    if severity in ("error", "warning"):
        doc["severity"] = severity
    elif severity:
        out.lost.append(f"{file}: {at}.{c.name}.severity: {c.severity!r} is not error or "
                        "warning; imported as error")
    if c.remediation:
        doc["remediation"] = c.remediation
    if c.unit:
        out.lost.append(f"{file}: {at}.{c.name}.unit: Cairn's constraints have no unit "
                        f"({c.unit!r}); not carried over")
    doc["source"] = f"AICR {file}"
    return doc


def _component(catalog: AicrCatalog, ref: ComponentRef, file: str, out: Imported, *,
               first: bool) -> dict[str, Any]:
    at = f"{file}: componentRefs.{ref.name}"
    entry = catalog.registry.get(ref.name)
    helm = entry.helm if entry is not None else None
    doc: dict[str, Any] = {"name": ref.name}
    chart = ref.chart or (helm.default_chart if helm is not None and first else "")
    repository = ref.source or (helm.default_repository if helm is not None and first else "")
    version = ref.version or (helm.default_version if helm is not None and first else "")
    namespace = ref.namespace or (helm.default_namespace if helm is not None and first else "")
    for key, value in (("chart", chart), ("repository", repository), ("version", version),
                       ("namespace", namespace)):
        if value:
            doc[key] = value
    values = _values(catalog, ref, file, base_merged=not first)
    enabled = values.pop("enabled", None) if ref.overrides.get("enabled") is False else None
    if values:
        doc["values"] = values
    if enabled is False:
        doc["enabled"] = False
    if ref.dependency_refs:
        doc["dependencies"] = list(ref.dependency_refs)
    doc["source"] = f"AICR {file}"
    if ref.type == "Kustomize" or (entry is not None and entry.type == "Kustomize"):
        out.lost.append(f"{at}.type: a Kustomize component; Cairn deploys Helm charts only")
    unsupported: list[tuple[str, object]] = [
        ("manifestFiles", ref.manifest_files), ("patches", ref.patches),
        ("expectedResources", ref.expected_resources),
        ("healthCheckAsserts", ref.health_check_asserts), ("tag", ref.tag), ("path", ref.path)]
    for key, given in unsupported:
        if given:
            out.lost.append(f"{at}.{key}: Cairn's components have no {key}; not carried over")
    if first and not chart and ref.type != "Kustomize":
        out.lost.append(f"{at}: no chart (a manifest-only component); Cairn bundles will "
                        "refuse it until it names one")
    return doc


def _values(catalog: AicrCatalog, ref: ComponentRef, file: str, *, base_merged: bool
            ) -> dict[str, Any]:
    """This overlay's contribution to the component's values: its values file (and the
    component's values.yaml, unless an ancestor already merged it), then its overrides."""
    base = f"components/{ref.name}/values.yaml"
    files = dict(catalog.data.files)
    if base_merged and ref.values_file != base:
        files.pop(base, None)
    return component_values(ref, files, file)


def _criteria_file(seen: dict[str, set[str]]) -> dict[str, Any]:
    dims: dict[str, Any] = {f: {"values": sorted(seen[f])} for f in CRITERIA_FIELDS}
    dims["os"]["aliases"] = {"al2": "amazonlinux", "al2023": "amazonlinux"} \
        if "amazonlinux" in seen["os"] else {}
    dims["service"]["aliases"] = {"self-managed": ANY, "self": ANY, "vanilla": ANY}
    dims["scheduler"] = {"values": ["kubernetes"]}
    order = ("service", "accelerator", "os", "intent", "platform", "scheduler")
    return {key: dims[key] for key in order}


def _checks_file(catalog: AicrCatalog, used: dict[str, str], out: Imported
                 ) -> dict[str, Any]:
    checks = []
    names = sorted(set(catalog.validators) | set(used))
    for name in names:
        known = catalog.validators.get(name)
        phase = used.get(name) or (known.phase if known else "conformance")
        if known is not None and known.phase and known.phase != phase:
            out.lost.append(f"validators/catalog.yaml: {name}: catalogued for phase "
                            f"{known.phase!r} but used in {phase!r}; imported as {phase!r}")
        if phase not in PHASES:
            continue
        checks.append({"name": name, "phase": phase, "needs_gpu": phase == "performance",
                       "timeout": (known.timeout if known and known.timeout else "5m"),
                       "description": (known.description if known and known.description
                                       else f"AICR check {name}")})
    if checks:
        out.lost.append("checks.yaml: AICR's validator catalog does not say which checks need "
                        "a GPU; performance checks are imported as needs_gpu: true, others false")
    return {"checks": checks}


def write_imported(imported: Imported, out: Path) -> None:
    for rel, text in imported.files.items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
