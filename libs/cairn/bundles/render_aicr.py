"""The Helm deployer's AICR layout, for a bundle of an AICR `RecipeResult`.

    README.md  deploy.sh  undeploy.sh  recipe.yaml  checksums.txt
    <component>/values.yaml  <component>/manifests/*.yaml

as `aicr bundle` lays one out: `recipe.yaml` is the recipe the bundle was made from, each
component folder holds its composed values and its manifests. `deploy.sh` installs in the
recipe's `deploymentOrder`: the upstream chart at its version with that `values.yaml`, then
the component's manifests (AICR's manifests are Helm templates, so they are installed as a
small local chart with the same values, release `<component>-manifests`; a manifest-only
component's release is the component's own name).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

import yaml

from cairn.bundles.checksums import checksums_text
from cairn.bundles.model import CHECKSUMS_FILE, PlannedComponent
from cairn.bundles.plan import BundlePlan
from cairn.bundles.render_helm import _RETRY
from cairn.bundles.text import GENERATED, dump_yaml, shell_quote
from cairn.errors import InvalidInput
from cairn.recipes.aicr.model import RecipeResult

RECIPE_FILE = "recipe.yaml"


def manifest_files(result: RecipeResult, files: Mapping[str, bytes] | None, shown: str,
                   ) -> dict[str, dict[str, bytes]]:
    """Per enabled component: bundle file name -> manifest content.

    Raises:
        InvalidInput: a manifest the data does not hold, or two with one file name.
    """
    out: dict[str, dict[str, bytes]] = {}
    for ref in result.component_refs:
        if not ref.enabled or not ref.manifest_files:
            continue
        mine: dict[str, bytes] = {}
        for rel in ref.manifest_files:
            content = files.get(rel) if files is not None else None
            if content is None:
                raise InvalidInput(f"manifest {rel!r} is not in the recipe data (give the data "
                                   "directory it comes from with --data DIR)", file=shown,
                                   field=f"componentRefs.{ref.name}.manifestFiles")
            name = PurePosixPath(rel).name
            if name in mine:
                raise InvalidInput(f"two manifests named {name!r}", file=shown,
                                   field=f"componentRefs.{ref.name}.manifestFiles")
            mine[name] = content
        out[ref.name] = mine
    return out


def _install(c: PlannedComponent, manifests: Mapping[str, bytes]) -> list[str]:
    name, ns = shell_quote(c.name), shell_quote(c.namespace)
    lines = [f'echo "==> {c.name} {c.version or "(manifests)"}"']
    version = f" --version {shell_quote(c.version)}" if c.version else ""
    if c.repository:
        chart = (shell_quote(f"{c.repository.rstrip('/')}/{c.chart_name}") if c.is_oci
                 else f"{shell_quote(c.chart_name)} --repo {shell_quote(c.repository)}")
        lines.append(f"retry helm upgrade --install {name} {chart}{version} --namespace {ns} "
                     f'--create-namespace -f {shell_quote(c.name + "/values.yaml")} --wait '
                     '--timeout "$TIMEOUT"')
    if manifests:
        release = f"{c.name}-manifests" if c.repository else c.name
        lines.append(f"install_manifests {name} {shell_quote(release)} {ns}")
    return lines


def deploy_sh(plan: BundlePlan, manifests: Mapping[str, Mapping[str, bytes]]) -> str:
    recipe = plan.manifest.recipe
    lines = ["#!/usr/bin/env bash", f"# {GENERATED}",
             f"# Installs recipe {recipe} in its deploymentOrder; safe to run again.",
             "set -euo pipefail", 'cd "$(dirname "$0")"', "", _RETRY,
             'WORK="$(mktemp -d)"', "trap 'rm -rf \"$WORK\"' EXIT", "",
             "# install_manifests COMPONENT RELEASE NAMESPACE: the component's manifests (Helm",
             "# templates) as a local chart, with the component's values.",
             "install_manifests() {",
             '  local chart="$WORK/$2"',
             '  mkdir -p "$chart/templates"',
             '  cp "./$1/manifests/"*.yaml "$chart/templates/"',
             '  printf "apiVersion: v2\\nname: %s\\nversion: 1.0.0\\n" "$2" > "$chart/Chart.yaml"',
             '  retry helm upgrade --install "$2" "$chart" --namespace "$3" --create-namespace \\',
             '    -f "./$1/values.yaml" --wait --timeout "$TIMEOUT"',
             "}", ""]
    for c in plan.manifest.components:
        lines += _install(c, manifests.get(c.name, {}))
    lines.append(f'echo "deployed {len(plan.manifest.components)} components"')
    return "\n".join(lines) + "\n"


def undeploy_sh(plan: BundlePlan, manifests: Mapping[str, Mapping[str, bytes]]) -> str:
    lines = ["#!/usr/bin/env bash", f"# {GENERATED}",
             f"# Removes recipe {plan.manifest.recipe} in reverse deploymentOrder.",
             "set -euo pipefail", "", _RETRY]
    for c in reversed(plan.manifest.components):
        releases = [c.name] if c.repository else []
        if manifests.get(c.name):
            releases.insert(0, f"{c.name}-manifests" if c.repository else c.name)
        for release in releases:
            lines += [f'echo "==> removing {release}"',
                      f"retry helm uninstall {shell_quote(release)} --namespace "
                      f'{shell_quote(c.namespace)} --ignore-not-found --wait --timeout "$TIMEOUT"']
    lines.append(f'echo "removed {len(plan.manifest.components)} components"')
    return "\n".join(lines) + "\n"


def readme(plan: BundlePlan, result: RecipeResult, manifests: Mapping[str, Any]) -> str:
    crit = result.criteria
    where = ", ".join(f"{k}={getattr(crit, k)}" for k in
                      ("service", "accelerator", "os", "intent", "platform")
                      if getattr(crit, k) not in ("", "any")) or "any cluster"
    lines = [f"# Deployment bundle: {plan.manifest.recipe}", "", f"<!-- {GENERATED} -->", "",
             f"For {where}; overlays applied: "
             f"{' -> '.join(result.metadata.applied_overlays) or '(none listed)'}.",
             "The recipe is `recipe.yaml` (AICR's RecipeResult).", "",
             "| # | component | chart | version | namespace | manifests |",
             "|---|---|---|---|---|---|"]
    for i, c in enumerate(plan.manifest.components, 1):
        chart = f"{c.chart_name} ({c.repository})" if c.repository else "(manifests only)"
        lines.append(f"| {i} | {c.name} | {chart} | {c.version or '-'} | {c.namespace} | "
                     f"{len(manifests.get(c.name, {}))} |")
    unpinned = [c.name for c in plan.manifest.components if c.repository and not c.version]
    lines += ["", "## Deploy", "", "Needs `helm` 3.8 or newer and a kubeconfig for the cluster.",
              "", "```sh", "./deploy.sh       # install or upgrade, in deploymentOrder",
              "./undeploy.sh     # remove, in reverse order", "```", "",
              "`CAIRN_RETRIES` (default 5), `CAIRN_RETRY_DELAY` (seconds, default 5) and",
              "`CAIRN_HELM_TIMEOUT` (default 10m) tune both."]
    if unpinned:
        lines += ["", f"Not pinned by the recipe (Helm installs the latest): "
                      f"{', '.join(unpinned)}."]
    lines += ["", "## Check", "", "```sh",
              "cairn bundle verify .   # every file matches checksums.txt, nothing added", "```",
              ""]
    return "\n".join(lines)


def render(plan: BundlePlan, result: RecipeResult, recipe_doc: dict[str, Any],
           manifests: Mapping[str, Mapping[str, bytes]]) -> dict[str, bytes]:
    """Every file of the AICR-layout bundle, checksums.txt included."""
    files: dict[str, bytes] = {
        "README.md": readme(plan, result, manifests).encode(),
        "deploy.sh": deploy_sh(plan, manifests).encode(),
        "undeploy.sh": undeploy_sh(plan, manifests).encode(),
        RECIPE_FILE: yaml.safe_dump(recipe_doc, sort_keys=False).encode(),
    }
    for c in plan.manifest.components:
        files[f"{c.name}/values.yaml"] = dump_yaml(
            c.values, f"{GENERATED}\nValues for {c.name}.").encode()
        for name, content in manifests.get(c.name, {}).items():
            files[f"{c.name}/manifests/{name}"] = content
    files[CHECKSUMS_FILE] = checksums_text(files).encode()
    return files
