"""The k0rdent deployer: chart sources, a ServiceTemplate and chain per component, and one
MultiClusterService that deploys them, in order, to every cluster the selector matches.

Everything but the MultiClusterService (cluster-scoped) lives in k0rdent's system namespace,
where MultiClusterServices look their templates up. Each chart repository is a Flux
HelmRepository labelled `k0rdent.mirantis.com/managed` (k0rdent only uses managed sources),
`type: oci` for an OCI registry, so every ServiceTemplate has the same shape: a `chartSpec`
with the pinned version. Templates and chains are immutable in k0rdent, so both are named by
version; a chain holds the current template and, with `--upgrade-from`, the template the
running bundle installed, with the new one as its available upgrade (k0rdent moves a
service to another template only along a chain). The services carry the composed values as
YAML text and `dependsOn` their dependencies, so k0rdent installs them in the recipe's order.
"""

from __future__ import annotations

from typing import Any

from cairn.bundles.k0rdent_target import template_name
from cairn.bundles.model import BundleManifest, K0rdentTarget, PlannedComponent
from cairn.bundles.sources import Repository, repositories
from cairn.bundles.text import GENERATED, dump_yaml, slug

API_VERSION = "k0rdent.mirantis.com/v1beta1"
NAMESPACE = "kcm-system"
MANAGED = {"k0rdent.mirantis.com/managed": "true"}


SHARED_LABELS = {"app.kubernetes.io/managed-by": "cairn"}
"""Sources, templates and chains are named by content, so two recipes with the same chart at
the same version share them: they carry no recipe label for the two to fight over."""


def source_name(repo: Repository) -> str:
    return slug(f"cairn-{repo.alias}")


def chain_name(component: PlannedComponent, target: K0rdentTarget) -> str:
    """Named by its content, as its spec never changes: `gpu-operator-v26-7-0`, or
    `gpu-operator-v25-10-1-to-v26-7-0` when it upgrades from an older template."""
    old = target.upgrade_from.get(component.name)
    if old is None:
        return template_name(component)
    start = old.removeprefix(f"{slug(component.name)}-")
    return slug(f"{component.name}-{start}-to-{component.version}", limit=253)


def helm_repository(repo: Repository) -> dict[str, Any]:
    spec: dict[str, Any] = {"interval": "1h", "url": repo.url, "timeout": "2m"}
    if repo.is_oci:
        spec["type"] = "oci"
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmRepository",
        "metadata": {"name": source_name(repo), "namespace": NAMESPACE,
                     "labels": {**SHARED_LABELS, **MANAGED}},
        "spec": spec,
    }


def service_template(component: PlannedComponent, repo: Repository) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ServiceTemplate",
        "metadata": {"name": template_name(component), "namespace": NAMESPACE,
                     "labels": SHARED_LABELS,
                     "annotations": {"cairn.dev/chart": component.chart}},
        "spec": {"helm": {"chartSpec": {
            "chart": component.chart_name,
            "version": component.version,
            "interval": "10m",
            "sourceRef": {"kind": "HelmRepository", "name": source_name(repo)},
        }}},
    }


def service_template_chain(component: PlannedComponent,
                           target: K0rdentTarget) -> dict[str, Any]:
    current = template_name(component)
    supported: list[dict[str, Any]] = []
    old = target.upgrade_from.get(component.name)
    if old is not None:
        supported.append({"name": old, "availableUpgrades": [{"name": current}]})
    supported.append({"name": current})
    return {
        "apiVersion": API_VERSION,
        "kind": "ServiceTemplateChain",
        "metadata": {"name": chain_name(component, target), "namespace": NAMESPACE,
                     "labels": SHARED_LABELS},
        "spec": {"supportedTemplates": supported},
    }


def service(component: PlannedComponent, by_name: dict[str, PlannedComponent],
            target: K0rdentTarget) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": component.name,
        "namespace": component.namespace,
        "template": template_name(component),
        "templateChain": chain_name(component, target),
        "values": dump_yaml(component.values) if component.values else "",
        # CRDs follow the chart on upgrade, as the flux deployer's CreateReplace does.
        "helmOptions": {"wait": True, "timeout": "10m0s",
                        "upgradeOptions": {"upgradeCRDs": True}},
    }
    if not entry["values"]:
        del entry["values"]
    if component.dependencies:
        entry["dependsOn"] = [{"name": d, "namespace": by_name[d].namespace}
                              for d in component.dependencies]
    return entry


def multi_cluster_service(manifest: BundleManifest, target: K0rdentTarget,
                          digest: str) -> dict[str, Any]:
    by_name = {c.name: c for c in manifest.components}
    return {
        "apiVersion": API_VERSION,
        "kind": "MultiClusterService",
        "metadata": {"name": mcs_name(manifest),
                     "labels": {**SHARED_LABELS, "cairn.dev/recipe": slug(manifest.recipe)},
                     "annotations": {"cairn.dev/recipe-digest": digest}},
        "spec": {
            "clusterSelector": {"matchLabels": dict(target.cluster_selector)},
            "serviceSpec": {
                "services": [service(c, by_name, target) for c in manifest.components],
                "priority": 100,
            },
        },
    }


def mcs_name(manifest: BundleManifest) -> str:
    return slug(f"cairn-{manifest.recipe}")


def render(manifest: BundleManifest, digest: str) -> dict[str, str]:
    target = manifest.k0rdent
    if target is None:
        raise ValueError("a k0rdent bundle is planned with its cluster selector")
    repos = repositories(manifest.components)
    files: dict[str, str] = {}
    for repo in repos.values():
        files[f"sources/{source_name(repo)}.yaml"] = dump_yaml(
            helm_repository(repo), GENERATED)
    for c in manifest.components:
        files[f"templates/{c.name}.yaml"] = dump_yaml(
            service_template(c, repos[c.repository]), GENERATED)
        files[f"chains/{c.name}.yaml"] = dump_yaml(
            service_template_chain(c, target), GENERATED)
    files["multiclusterservice.yaml"] = dump_yaml(
        multi_cluster_service(manifest, target, digest), GENERATED)
    return files


def commands(manifest: BundleManifest) -> list[str]:
    """The README's deploy section."""
    target = manifest.k0rdent
    selector = target.cluster_selector if target else {}
    labels = " ".join(f"{k}={v}" for k, v in selector.items())
    return [
        "## Deploy", "",
        "Needs a k0rdent management cluster (kcm 1.x, API `k0rdent.mirantis.com/v1beta1`) and",
        f"`kubectl` pointed at it. Sources, templates and chains go to `{NAMESPACE}`; wait for",
        "the templates to be valid before the MultiClusterService refers to them:", "",
        "```sh",
        "kubectl apply -f sources/ -f templates/",
        "kubectl wait -f templates/ --for=jsonpath='{.status.valid}'=true --timeout=10m",
        "kubectl apply -f chains/ -f multiclusterservice.yaml",
        "```", "",
        "Every cluster whose labels match the selector gets the components above, in order",
        "(each service `dependsOn` its dependencies). Label a cluster to select it:", "",
        "```sh", f"kubectl label clusterdeployment -n NAMESPACE CLUSTER {labels}", "```", "",
        f"`kubectl delete multiclusterservice {mcs_name(manifest)}` removes the services from "
        "every cluster.",
        "Templates and chains are immutable: an upgrade renders new ones (named by version)",
        "beside the old; render the next bundle with `--upgrade-from` this one so its chains",
        "let k0rdent move each service from this bundle's template to the new one.",
    ]
