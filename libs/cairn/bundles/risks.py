"""What an upgrade from one bundle to another could destroy or break, for a reviewer to see.

Found from the two manifests alone: a removed component is uninstalled (Argo CD and Flux
prune it), a namespace change reinstalls the release elsewhere, a different chart or repository
replaces what the release runs, a downgrade rolls a chart back, and a major version (or, below
1.0, a minor one, as semver reads it) may change the chart's values or CRDs incompatibly.
For k0rdent, a changed cluster selector takes the services off clusters it no longer
matches, and a service moves to a new template only along its chain (`--upgrade-from`).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from cairn.bundles.k0rdent_target import template_name
from cairn.bundles.model import BundleManifest, PlannedComponent
from cairn.recipes.versions import compare_versions, parse_version

Risk = Literal["removed", "namespace-changed", "chart-changed", "repository-changed",
               "downgrade", "major-version", "selector-changed", "no-upgrade-path"]
SELECTOR = "(cluster selector)"
"""The `component` of a risk that concerns the whole MultiClusterService."""


class UpgradeRisk(msgspec.Struct, kw_only=True, frozen=True):
    component: str
    risk: Risk
    detail: str


def _major(version: str) -> tuple[int, ...] | None:
    parsed = parse_version(version)
    if parsed is None:
        return None
    core = parsed[0] + (0, 0)
    return core[:1] if core[0] > 0 else core[:2]


def _version_risk(old: PlannedComponent, new: PlannedComponent) -> UpgradeRisk | None:
    if old.version == new.version:
        return None
    try:
        order = compare_versions(new.version, old.version)
    except ValueError:
        return None
    if order < 0:
        return UpgradeRisk(component=new.name, risk="downgrade",
                           detail=f"{old.version} -> {new.version}: a rollback; charts rarely "
                                  "support going back over CRD or storage changes")
    if _major(old.version) != _major(new.version):
        return UpgradeRisk(component=new.name, risk="major-version",
                           detail=f"{old.version} -> {new.version}: read the chart's upgrade "
                                  "notes (values, CRDs)")
    return None


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items()) or "(none)"


def _k0rdent_risks(old: BundleManifest, new: BundleManifest) -> list[UpgradeRisk]:
    if new.k0rdent is None:
        return []
    risks: list[UpgradeRisk] = []
    if old.k0rdent is not None and old.k0rdent.cluster_selector != new.k0rdent.cluster_selector:
        risks.append(UpgradeRisk(
            component=SELECTOR, risk="selector-changed",
            detail=f"{_labels(old.k0rdent.cluster_selector)} -> "
                   f"{_labels(new.k0rdent.cluster_selector)}: clusters the new selector does not "
                   "match lose every service of the recipe"))
    before = {c.name: c for c in old.components}
    for component in new.components:
        previous = before.get(component.name)
        if previous is None or template_name(previous) == template_name(component):
            continue
        if new.k0rdent.upgrade_from.get(component.name) != template_name(previous):
            risks.append(UpgradeRisk(
                component=component.name, risk="no-upgrade-path",
                detail=f"k0rdent moves the service from {template_name(previous)} to "
                       f"{template_name(component)} only along its ServiceTemplateChain: "
                       "render the new bundle with --upgrade-from the old one"))
    return risks


def upgrade_risks(old: BundleManifest, new: BundleManifest) -> list[UpgradeRisk]:
    """Risks, by component name then kind."""
    before = {c.name: c for c in old.components}
    after = {c.name: c for c in new.components}
    risks: list[UpgradeRisk] = []
    for name in sorted(set(before) - set(after)):
        risks.append(UpgradeRisk(
            component=name, risk="removed",
            detail=f"its release in {before[name].namespace} and everything it created are "
                   "deleted (Argo CD and Flux prune it; with helm, run helm uninstall)"))
    for name in sorted(set(before) & set(after)):
        a, b = before[name], after[name]
        if a.namespace != b.namespace:
            risks.append(UpgradeRisk(
                component=name, risk="namespace-changed",
                detail=f"{a.namespace} -> {b.namespace}: the release is installed anew there "
                       "and the old one removed; namespaced data does not follow"))
        if a.chart_name != b.chart_name:
            risks.append(UpgradeRisk(component=name, risk="chart-changed",
                                     detail=f"{a.chart} -> {b.chart}: the release runs "
                                            "another chart"))
        elif a.repository != b.repository:
            risks.append(UpgradeRisk(component=name, risk="repository-changed",
                                     detail=f"{a.repository} -> {b.repository}: same chart "
                                            "name from another source"))
        version = _version_risk(a, b)
        if version is not None:
            risks.append(version)
    risks += _k0rdent_risks(old, new)
    return sorted(risks, key=lambda r: (r.component, r.risk))
