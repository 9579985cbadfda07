"""What an upgrade from one bundle to another could destroy or break, for a reviewer to see.

Found from the two manifests alone: a removed component is uninstalled (Argo CD and Flux
prune it), a namespace change reinstalls the release elsewhere, a different chart or repository
replaces what the release runs, a downgrade rolls a chart back, and a major version (or, below
1.0, a minor one, as semver reads it) may change the chart's values or CRDs incompatibly.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from cairn.bundles.model import BundleManifest, PlannedComponent
from cairn.recipes.versions import compare_versions, parse_version

Risk = Literal["removed", "namespace-changed", "chart-changed", "repository-changed",
               "downgrade", "major-version"]


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
    return sorted(risks, key=lambda r: (r.component, r.risk))
