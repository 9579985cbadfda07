"""The helmfile deployer: `helmfile.yaml` with repositories, releases and `needs`.

Values live in `values/<component>.yaml`, flat as the chart reads them. `needs` names each
dependency as `namespace/release`, which is how Helmfile identifies a release.
"""

from __future__ import annotations

from typing import Any

from cairn.bundles.model import BundleManifest
from cairn.bundles.sources import repositories
from cairn.bundles.text import GENERATED, dump_yaml


def helmfile(manifest: BundleManifest) -> dict[str, Any]:
    repos = repositories(manifest.components)
    by_name = {c.name: c for c in manifest.components}
    repo_entries: list[dict[str, Any]] = []
    for repo in repos.values():
        entry: dict[str, Any] = {"name": repo.alias, "url": repo.bare_url if repo.is_oci
                                 else repo.url}
        if repo.is_oci:
            entry["oci"] = True
        repo_entries.append(entry)
    releases = []
    for c in manifest.components:
        release: dict[str, Any] = {
            "name": c.name,
            "namespace": c.namespace,
            "chart": f"{repos[c.repository].alias}/{c.chart_name}",
            "version": c.version,
            "createNamespace": True,
            "values": [f"values/{c.name}.yaml"],
        }
        if c.dependencies:
            release["needs"] = [f"{by_name[d].namespace}/{d}" for d in c.dependencies]
        releases.append(release)
    return {
        "helmDefaults": {"wait": True, "timeout": 600, "atomic": False,
                         "historyMax": 10},
        "repositories": repo_entries,
        "releases": releases,
    }


def render(manifest: BundleManifest) -> dict[str, str]:
    files = {"helmfile.yaml": dump_yaml(helmfile(manifest), GENERATED)}
    for c in manifest.components:
        files[f"values/{c.name}.yaml"] = dump_yaml(
            c.values, f"{GENERATED}\nValues for {c.chart} {c.version}.")
    return files
