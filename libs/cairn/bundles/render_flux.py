"""The flux deployer: chart sources, a HelmRelease per component with dependsOn, a Kustomization.

HTTP chart repositories become HelmRepository sources; an OCI chart gets its own OCIRepository
(pinned by tag, Helm chart layer selected) referenced with `chartRef`. `kustomization.yaml`
lists those objects for kustomize; `flux-kustomization.yaml` is the Flux Kustomization that
applies the bundle's folder from the cluster's Git source, waiting for every release.
"""

from __future__ import annotations

from typing import Any

from cairn.bundles.model import BundleManifest, PlannedComponent
from cairn.bundles.options import GitTarget
from cairn.bundles.sources import Repository, repositories
from cairn.bundles.text import GENERATED, dump_yaml, slug

NAMESPACE = "flux-system"
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
_LABELS = {"app.kubernetes.io/managed-by": "cairn"}


def helm_repository(repo: Repository) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmRepository",
        "metadata": {"name": repo.alias, "namespace": NAMESPACE, "labels": _LABELS},
        "spec": {"interval": "1h", "url": repo.url, "timeout": "2m"},
    }


def oci_repository(component: PlannedComponent) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": {"name": component.name, "namespace": NAMESPACE, "labels": _LABELS},
        "spec": {
            "interval": "1h",
            "url": component.oci_ref,
            "ref": {"tag": component.version},
            "layerSelector": {"mediaType": HELM_CHART_LAYER, "operation": "copy"},
            "timeout": "2m",
        },
    }


def helm_release(component: PlannedComponent, repo: Repository) -> dict[str, Any]:
    spec: dict[str, Any] = {"interval": "10m", "releaseName": component.name,
                            "targetNamespace": component.namespace,
                            "storageNamespace": component.namespace}
    if repo.is_oci:
        spec["chartRef"] = {"kind": "OCIRepository", "name": component.name,
                            "namespace": NAMESPACE}
    else:
        spec["chart"] = {"spec": {
            "chart": component.chart_name, "version": component.version,
            "sourceRef": {"kind": "HelmRepository", "name": repo.alias, "namespace": NAMESPACE},
        }}
    if component.dependencies:
        spec["dependsOn"] = [{"name": d, "namespace": NAMESPACE} for d in component.dependencies]
    # Flux skips a chart's CRDs on upgrade by default; operators' CRDs must follow the chart.
    spec["install"] = {"createNamespace": True, "crds": "CreateReplace",
                       "remediation": {"retries": 5}}
    spec["upgrade"] = {"crds": "CreateReplace",
                       "remediation": {"retries": 5, "remediateLastFailure": True}}
    spec["timeout"] = "10m"
    spec["values"] = component.values
    return {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": component.name, "namespace": NAMESPACE, "labels": _LABELS},
        "spec": spec,
    }


def flux_kustomization(manifest: BundleManifest, git: GitTarget) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": slug(f"cairn-{manifest.recipe}"), "namespace": NAMESPACE,
                     "labels": _LABELS},
        "spec": {
            "interval": "10m",
            "path": "./" + git.join() if git.join() != "." else "./",
            "prune": True,
            "wait": True,
            "timeout": "30m",
            "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
        },
    }


def render(manifest: BundleManifest, git: GitTarget) -> dict[str, str]:
    repos = repositories(manifest.components)
    files: dict[str, str] = {}
    for repo in repos.values():
        if not repo.is_oci:
            files[f"sources/{repo.alias}.yaml"] = dump_yaml(helm_repository(repo), GENERATED)
    for c in manifest.components:
        if repos[c.repository].is_oci:
            files[f"sources/{c.name}-oci.yaml"] = dump_yaml(oci_repository(c), GENERATED)
        files[f"releases/{c.name}.yaml"] = dump_yaml(helm_release(c, repos[c.repository]),
                                                     GENERATED)
    kustomize = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                 "resources": sorted(files)}
    files["kustomization.yaml"] = dump_yaml(kustomize, GENERATED)
    files["flux-kustomization.yaml"] = dump_yaml(flux_kustomization(manifest, git), GENERATED)
    return files
