"""The argocd deployer: an app-of-apps, one Application per component, sync waves in order.

The root Application (`app-of-apps.yaml`) points at `apps/` in the Git repository the bundle is
committed to. Each child Application installs the upstream chart directly at the pinned version
with the composed values inline, in the sync wave of its dependency level. OCI registries get a
repository Secret with `enableOCI`, one wave earlier, because Argo CD needs one to pull Helm
charts from an OCI registry.
"""

from __future__ import annotations

from typing import Any

from cairn.bundles.model import BundleManifest, PlannedComponent
from cairn.bundles.options import GitTarget
from cairn.bundles.sources import Repository, repositories
from cairn.bundles.text import GENERATED, dump_yaml, slug

NAMESPACE = "argocd"
IN_CLUSTER = "https://kubernetes.default.svc"
_LABELS = {"app.kubernetes.io/managed-by": "cairn"}


def root_name(manifest: BundleManifest) -> str:
    return slug(f"cairn-{manifest.recipe}")


def application(component: PlannedComponent, repo: Repository, recipe: str) -> dict[str, Any]:
    source: dict[str, Any] = {
        "repoURL": repo.bare_url if repo.is_oci else repo.url,
        "chart": component.chart_name,
        "targetRevision": component.version,
        "helm": {"releaseName": component.name, "valuesObject": component.values},
    }
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": component.name,
            "namespace": NAMESPACE,
            "labels": {**_LABELS, "cairn.dev/recipe": slug(recipe)},
            "annotations": {"argocd.argoproj.io/sync-wave": str(component.wave)},
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
        },
        "spec": {
            "project": "default",
            "source": source,
            "destination": {"server": IN_CLUSTER, "namespace": component.namespace},
            "syncPolicy": {
                "automated": {"prune": True, "selfHeal": True},
                "syncOptions": ["CreateNamespace=true", "ServerSideApply=true"],
                "retry": {"limit": 5, "backoff": {"duration": "10s", "factor": 2,
                                                  "maxDuration": "5m"}},
            },
        },
    }


def oci_repository_secret(repo: Repository) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"repo-{repo.alias}"[:63].rstrip("-"),
            "namespace": NAMESPACE,
            "labels": {**_LABELS, "argocd.argoproj.io/secret-type": "repository"},
            "annotations": {"argocd.argoproj.io/sync-wave": "-1"},
        },
        "type": "Opaque",
        "stringData": {"name": repo.alias, "type": "helm", "url": repo.bare_url,
                       "enableOCI": "true"},
    }


def app_of_apps(manifest: BundleManifest, git: GitTarget) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": root_name(manifest), "namespace": NAMESPACE, "labels": _LABELS,
                     "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
        "spec": {
            "project": "default",
            "source": {"repoURL": git.repo_url, "targetRevision": git.revision,
                       "path": git.join("apps")},
            "destination": {"server": IN_CLUSTER, "namespace": NAMESPACE},
            "syncPolicy": {"automated": {"prune": True, "selfHeal": True}},
        },
    }


def render(manifest: BundleManifest, git: GitTarget) -> dict[str, str]:
    repos = repositories(manifest.components)
    files = {"app-of-apps.yaml": dump_yaml(app_of_apps(manifest, git), GENERATED)}
    for c in manifest.components:
        files[f"apps/{c.name}.yaml"] = dump_yaml(
            application(c, repos[c.repository], manifest.recipe), GENERATED)
    for repo in repos.values():
        if repo.is_oci:
            files[f"apps/repo-{repo.alias}.yaml"] = dump_yaml(oci_repository_secret(repo),
                                                              GENERATED)
    return files
