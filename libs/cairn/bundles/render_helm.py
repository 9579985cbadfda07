"""The helm deployer: a wrapper chart per component, deploy.sh and undeploy.sh.

Each component folder is a chart whose only dependency is the upstream chart at the pinned
version, with the composed values under the dependency's name (how Helm passes values to a
subchart). That makes every folder something `helm lint` can check and `helm dependency build`
can fetch, and nothing here pretends to know what the upstream chart renders.
"""

from __future__ import annotations

from cairn.bundles.model import BundleManifest, PlannedComponent
from cairn.bundles.sources import repositories
from cairn.bundles.text import GENERATED, dump_yaml, shell_quote

_RETRY = """\
RETRIES="${CAIRN_RETRIES:-5}"
TIMEOUT="${CAIRN_HELM_TIMEOUT:-10m}"
DELAY="${CAIRN_RETRY_DELAY:-5}"

# retry CMD...: run CMD up to $RETRIES times, waiting DELAY, 2*DELAY, ... seconds between.
retry() {
  local attempt=1
  until "$@"; do
    if [ "$attempt" -ge "$RETRIES" ]; then
      echo "failed after $attempt attempts: $*" >&2
      return 1
    fi
    echo "attempt $attempt failed, retrying in $((attempt * DELAY)) s: $*" >&2
    sleep $((attempt * DELAY))
    attempt=$((attempt + 1))
  done
}
"""


def chart_yaml(component: PlannedComponent, recipe: str) -> str:
    dependency = {"name": component.chart_name, "version": component.version,
                  "repository": component.repository}
    chart = {
        "apiVersion": "v2",
        "name": component.name,
        "description": f"{component.name} for recipe {recipe}: {component.chart} "
                       f"{component.version} with the recipe's values.",
        "type": "application",
        "version": "1.0.0",
        "appVersion": component.version,
        "dependencies": [dependency],
    }
    return dump_yaml(chart, GENERATED)


def values_yaml(component: PlannedComponent) -> str:
    comment = (f"{GENERATED}\nValues for {component.chart} {component.version}, under the "
               f"subchart's name.\nWhere each value came from: cairn bundle explain BUNDLE_DIR "
               f"--component {component.name}")
    return dump_yaml({component.chart_name: component.values}, comment)


def deploy_sh(manifest: BundleManifest) -> str:
    lines = ["#!/usr/bin/env bash", f"# {GENERATED}",
             f"# Installs recipe {manifest.recipe} in dependency order; safe to run again.",
             "set -euo pipefail", 'cd "$(dirname "$0")"', "", _RETRY]
    repos = [r for r in repositories(manifest.components).values() if not r.is_oci]
    for repo in repos:
        lines.append(f"retry helm repo add --force-update {shell_quote(repo.alias)} "
                     f"{shell_quote(repo.url)}")
    if repos:
        lines.append("retry helm repo update")
    lines.append("")
    lines += [
        "# Charts are fetched into a scratch copy, so the bundle itself stays as verified.",
        'WORK="$(mktemp -d)"',
        "trap 'rm -rf \"$WORK\"' EXIT",
        "",
        "# install_component NAME NAMESPACE: fetch the upstream chart, install or upgrade it.",
        "install_component() {",
        '  cp -R "./$1" "$WORK/$1"',
        '  retry helm dependency build "$WORK/$1"',
        '  retry helm upgrade --install "$1" "$WORK/$1" --namespace "$2" --create-namespace \\',
        '    --wait --timeout "$TIMEOUT"',
        "}",
        "",
    ]
    for c in manifest.components:
        lines += [f'echo "==> {c.name} {c.version} (wave {c.wave})"',
                  f"install_component {shell_quote(c.name)} {shell_quote(c.namespace)}"]
    lines.append('echo "deployed ' + str(len(manifest.components)) + ' components"')
    return "\n".join(lines) + "\n"


def undeploy_sh(manifest: BundleManifest) -> str:
    lines = ["#!/usr/bin/env bash", f"# {GENERATED}",
             f"# Removes recipe {manifest.recipe} in reverse dependency order.",
             "set -euo pipefail", "", _RETRY]
    for c in reversed(manifest.components):
        lines += [
            f'echo "==> removing {c.name}"',
            f"retry helm uninstall {shell_quote(c.name)} --namespace {shell_quote(c.namespace)} "
            '--ignore-not-found --wait --timeout "$TIMEOUT"',
        ]
    lines.append('echo "removed ' + str(len(manifest.components)) + ' components"')
    return "\n".join(lines) + "\n"


def render(manifest: BundleManifest) -> dict[str, str]:
    files = {"deploy.sh": deploy_sh(manifest), "undeploy.sh": undeploy_sh(manifest)}
    for c in manifest.components:
        files[f"{c.name}/Chart.yaml"] = chart_yaml(c, manifest.recipe)
        files[f"{c.name}/values.yaml"] = values_yaml(c)
    return files
