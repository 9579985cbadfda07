"""What a bundle is made of: planned components, where each value came from, the manifest.

`bundle.yaml` (the manifest) and `provenance.yaml` are written into every bundle; `cairn
bundle diff` and `cairn bundle explain` read them back, so both work on a bundle alone,
without the catalog that produced it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Deployer = Literal["helm", "argocd", "flux", "helmfile", "pulumi", "k0rdent"]
DEPLOYERS: tuple[str, ...] = ("helm", "argocd", "flux", "helmfile", "pulumi", "k0rdent")

Layer = Literal["base", "overlay", "mixin", "override", "set"]
LAYERS: tuple[str, ...] = ("base", "overlay", "mixin", "override", "set")
"""Value layers from weakest to strongest; `set` is the command line's `--set`."""

BUNDLE_FORMAT = "cairn.bundle/v1"
MANIFEST_FILE = "bundle.yaml"
PROVENANCE_FILE = "provenance.yaml"
CHECKSUMS_FILE = "checksums.txt"


class _Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    pass


class ValueOrigin(_Strict, kw_only=True, frozen=True):
    """Which layer set one value of one component."""

    component: str
    path: str
    """Dotted path inside the component: `values.driver.enabled`, `version`, `chart`."""
    value: Any
    layer: Layer
    source: str
    """The file that set it (`overlays/eks.yaml`, an override file) or `--set`."""


class PlannedComponent(_Strict, kw_only=True, frozen=True):
    """One component as the bundle deploys it."""

    name: str
    chart: str
    repository: str
    version: str
    namespace: str
    dependencies: list[str] = []
    """Dependencies that are in this bundle (others are not deployed by it)."""
    wave: int = 0
    """Deployment level: 0 needs nothing, n needs something from level n-1."""
    values: dict[str, Any] = {}

    @property
    def chart_name(self) -> str:
        """The chart's own name, without a repository alias (`nvidia/gpu-operator` -> last)."""
        return self.chart.rsplit("/", 1)[-1]

    @property
    def is_oci(self) -> bool:
        return self.repository.startswith("oci://")

    @property
    def oci_ref(self) -> str:
        """`oci://registry/path/chart` for an OCI chart."""
        return f"{self.repository.rstrip('/')}/{self.chart_name}"


class K0rdentTarget(_Strict, kw_only=True, frozen=True):
    """Where a k0rdent bundle applies, and which templates its upgrade chains start from."""

    cluster_selector: dict[str, str]
    """Labels a cluster must carry for the MultiClusterService to deploy to it."""
    upgrade_from: dict[str, str] = {}
    """Component -> the ServiceTemplate of the bundle it upgrades (`--upgrade-from`)."""


class BundleManifest(_Strict, kw_only=True, frozen=True):
    """`bundle.yaml`: what a bundle deploys, in deployment order."""

    format: str = BUNDLE_FORMAT
    recipe: str
    applied: list[str]
    """Recipe files merged, in order."""
    deployer: Deployer
    overrides: list[str] = []
    """Override files given with `--values`, in order, as named on the command line."""
    sets: list[str] = []
    """`--set` assignments, in order."""
    components: list[PlannedComponent]
    k0rdent: K0rdentTarget | None = None
    """The k0rdent deployer's cluster selector and upgrade paths; absent for the others."""


class ProvenanceFile(_Strict, kw_only=True, frozen=True):
    """`provenance.yaml`: one row per value, for `cairn bundle explain`."""

    format: str = BUNDLE_FORMAT
    recipe: str
    values: list[ValueOrigin]
