"""`cairn bundle`: what each deployer writes, in which order, and that it is deterministic."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cairn.bundles import DEPLOYERS
from tests.unit.bundles_support import INFERENCE, TRAINING, cairn, render


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def manifest(root: Path) -> dict[str, object]:
    data = yaml.safe_load((root / "bundle.yaml").read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("deployer", DEPLOYERS)
def test_the_same_recipe_gives_byte_identical_bundles(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, deployer: str) -> None:
    first = tree(render(capsys, tmp_path / "one", INFERENCE, deployer))
    second = tree(render(capsys, tmp_path / "two", INFERENCE, deployer))
    assert first == second
    assert "checksums.txt" in first and "README.md" in first


@pytest.mark.parametrize("deployer", ["argocd", "pulumi", "k0rdent"])
def test_bundles_do_not_depend_on_the_process_hash_seed(tmp_path: Path, deployer: str) -> None:
    """Separate processes with different string hashing give the same bytes."""
    trees = []
    for seed in ("1", "2"):
        out = tmp_path / f"seed-{seed}"
        done = subprocess.run(
            [sys.executable, "-m", "cairn", "bundle", "--recipe", INFERENCE, "--deployer",
             deployer, "--repo-url", "https://git.example.com/x.git", "--out", str(out)],
            env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True,
            timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        trees.append(tree(out))
    assert trees[0] == trees[1]


def _order(root: Path) -> list[str]:
    return [c["name"] for c in manifest(root)["components"]]  # type: ignore[index]


def test_components_deploy_after_their_dependencies(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", TRAINING, "helm")
    order = _order(root)
    components = {c["name"]: c for c in manifest(root)["components"]}  # type: ignore[attr-defined]
    assert order.index("gpu-operator") > max(order.index(d) for d in
                                             ("cert-manager", "nfd", "kube-prometheus-stack"))
    assert order.index("kube-prometheus-stack") > order.index("prometheus-operator-crds")
    assert order.index("nvidia-dra-driver-gpu") > order.index("gpu-operator")
    waves = {name: c["wave"] for name, c in components.items()}
    assert (waves["prometheus-operator-crds"], waves["kube-prometheus-stack"],
            waves["gpu-operator"], waves["nvidia-dra-driver-gpu"]) == (0, 1, 2, 3)


def _fake_helm(bin_dir: Path, log: Path, fail_first: int = 0) -> None:
    """A `helm` that records its arguments and fails its first `fail_first` calls."""
    bin_dir.mkdir()
    script = bin_dir / "helm"
    script.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {log}\n'
        f'count=$(wc -l < {log})\n'
        f'if [ "$count" -le {fail_first} ]; then exit 1; fi\n')
    script.chmod(0o755)


def _run(script: Path, bin_dir: Path, retries: int = 3) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "CAIRN_RETRIES": str(retries), "CAIRN_RETRY_DELAY": "0"}
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_helm_scripts_install_in_order_with_retries_and_remove_in_reverse(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", TRAINING, "helm")
    order = _order(root)
    log = tmp_path / "helm.log"
    _fake_helm(tmp_path / "bin", log, fail_first=2)
    done = _run(root / "deploy.sh", tmp_path / "bin")
    assert done.returncode == 0, done.stderr
    assert "attempt 2 failed" in done.stderr
    calls = log.read_text().splitlines()
    installs = [c.split()[2] for c in calls if c.startswith("upgrade --install")]
    assert installs == order
    gpu = next(c for c in calls if c.startswith("upgrade --install gpu-operator"))
    assert "--namespace gpu-operator --create-namespace --wait" in gpu
    assert any(c.startswith("dependency build") and c.endswith("/gpu-operator") for c in calls)
    assert any(c.startswith("repo add --force-update nvidia https://helm.ngc.nvidia.com/nvidia")
               for c in calls)
    # The charts were fetched into a scratch copy: the bundle still verifies.
    assert cairn(capsys, "bundle", "verify", str(root))[0] == 0

    log = tmp_path / "helm-undeploy.log"
    _fake_helm(tmp_path / "bin2", log)
    done = _run(root / "undeploy.sh", tmp_path / "bin2")
    assert done.returncode == 0, done.stderr
    removed = [c.split()[1] for c in log.read_text().splitlines() if c.startswith("uninstall")]
    assert removed == order[::-1]


def test_helm_script_gives_up_after_its_retries(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", TRAINING, "helm")
    log = tmp_path / "helm.log"
    _fake_helm(tmp_path / "bin", log, fail_first=1000)
    done = _run(root / "deploy.sh", tmp_path / "bin", retries=2)
    assert done.returncode != 0
    assert "failed after 2 attempts" in done.stderr
    assert len(log.read_text().splitlines()) == 2


def test_helm_component_folders_wrap_the_pinned_upstream_chart(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", INFERENCE, "helm")
    chart = yaml.safe_load((root / "gpu-operator" / "Chart.yaml").read_text())
    assert chart["dependencies"] == [{"name": "gpu-operator", "version": "v26.7.0",
                                      "repository": "https://helm.ngc.nvidia.com/nvidia"}]
    values = yaml.safe_load((root / "gpu-operator" / "values.yaml").read_text())
    assert values["gpu-operator"]["driver"]["kernelModuleType"] == "open"
    oci = yaml.safe_load((root / "nvsentinel" / "Chart.yaml").read_text())
    assert oci["dependencies"][0]["repository"] == "oci://ghcr.io/nvidia"


def test_argocd_waves_follow_the_order(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", INFERENCE, "argocd")
    waves = {c["name"]: c["wave"] for c in manifest(root)["components"]}  # type: ignore[attr-defined]
    for name, wave in waves.items():
        app = yaml.safe_load((root / "apps" / f"{name}.yaml").read_text())
        assert app["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == str(wave)
        assert app["spec"]["destination"]["namespace"]
    root_app = yaml.safe_load((root / "app-of-apps.yaml").read_text())
    assert root_app["spec"]["source"]["path"] == "clusters/gpu/apps"
    grove = yaml.safe_load((root / "apps" / "grove.yaml").read_text())["spec"]["source"]
    assert (grove["repoURL"], grove["chart"]) == ("ghcr.io/ai-dynamo/grove", "grove-charts")


def test_flux_releases_depend_on_their_dependencies(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", INFERENCE, "flux")
    gpu = yaml.safe_load((root / "releases" / "gpu-operator.yaml").read_text())
    assert [d["name"] for d in gpu["spec"]["dependsOn"]] == [
        "cert-manager", "kube-prometheus-stack", "nfd"]
    assert gpu["spec"]["chart"]["spec"]["sourceRef"] == {
        "kind": "HelmRepository", "name": "nvidia", "namespace": "flux-system"}
    dra = yaml.safe_load((root / "releases" / "nvidia-dra-driver-gpu.yaml").read_text())
    assert dra["spec"]["chartRef"]["kind"] == "OCIRepository"
    listed = yaml.safe_load((root / "kustomization.yaml").read_text())["resources"]
    assert all((root / p).is_file() for p in listed)
    assert "flux-kustomization.yaml" not in listed


def test_helmfile_needs_name_namespace_and_release(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", INFERENCE, "helmfile")
    doc = yaml.safe_load((root / "helmfile.yaml").read_text())
    releases = {r["name"]: r for r in doc["releases"]}
    assert releases["gpu-operator"]["needs"] == [
        "cert-manager/cert-manager", "monitoring/kube-prometheus-stack",
        "node-feature-discovery/nfd"]
    assert releases["gpu-operator"]["chart"] == "nvidia/gpu-operator"
    repos = {r["name"]: r for r in doc["repositories"]}
    grove_repo = releases["grove"]["chart"].split("/")[0]
    assert repos[grove_repo] == {"name": grove_repo, "url": "ghcr.io/ai-dynamo/grove",
                                 "oci": True}
    names = [r["name"] for r in doc["releases"]]
    for release in doc["releases"]:
        for need in release.get("needs", []):
            assert names.index(need.split("/")[1]) < names.index(release["name"])


@pytest.mark.parametrize("deployer", DEPLOYERS)
def test_readme_gives_the_commands(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                   deployer: str) -> None:
    text = (render(capsys, tmp_path / "b", TRAINING, deployer) / "README.md").read_text()
    expected = {"helm": "./deploy.sh", "argocd": "kubectl apply -n argocd -f app-of-apps.yaml",
                "flux": "kubectl apply -f flux-kustomization.yaml",
                "helmfile": "helmfile -f helmfile.yaml apply", "pulumi": "pulumi up",
                "k0rdent": "kubectl apply -f chains/ -f multiclusterservice.yaml"}[deployer]
    assert expected in text
    assert "cairn bundle verify ." in text
    assert "| gpu-operator | nvidia/gpu-operator" in text


def test_overrides_then_set(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("gpu-operator:\n  driver:\n    version: 580.105.08\n    enabled: false\n"
                    "nvsentinel:\n  replicas: 2\n")
    root = render(capsys, tmp_path / "b", TRAINING, "helmfile", "--values", str(site),
                  "--set", "gpu-operator.driver.enabled=true", "--set", "nvsentinel.mode=dry")
    gpu = yaml.safe_load((root / "values" / "gpu-operator.yaml").read_text())
    assert gpu["driver"]["version"] == "580.105.08"
    assert gpu["driver"]["enabled"] is True  # --set wins over the file, which won over base
    assert gpu["driver"]["kernelModuleType"] == "open"  # the recipe's value merged, not lost
    sentinel = yaml.safe_load((root / "values" / "nvsentinel.yaml").read_text())
    assert sentinel == {"mode": "dry", "replicas": 2}


def test_bad_input_is_one_message_and_exit_3(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    bad = tmp_path / "site.yaml"
    bad.write_text("gpu-operator:\n  cdi: {}\ngpu-operater:\n  x: 1\n")
    code, _, err = cairn(capsys, "bundle", "--recipe", TRAINING, "--out", str(tmp_path / "o"),
                         "--values", str(bad))
    assert code == 3
    assert f"{bad}:3: gpu-operater: no component 'gpu-operater'" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()
    code, _, err = cairn(capsys, "bundle", "--recipe", TRAINING, "--out", str(tmp_path / "o"),
                         "--set", "gpu-operator=1")
    assert code == 3 and "--set: expected COMPONENT.key.path=VALUE" in err
    code, _, err = cairn(capsys, "bundle", "--recipe", TRAINING, "--out", str(tmp_path / "o"),
                         "--deployer", "argocd")
    assert code == 3 and "--repo-url" in err
    code, _, err = cairn(capsys, "bundle", "--recipe", "no-such", "--out", str(tmp_path / "o"))
    assert code == 4
    code, _, err = cairn(capsys, "bundle", "--recipe", "cpu-slurm", "--out", str(tmp_path / "o"))
    assert code == 3 and "deploys no components" in err
    assert not (tmp_path / "o").exists()


def test_an_existing_directory_is_not_overwritten(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    code, _, err = cairn(capsys, "bundle", "--recipe", TRAINING, "--out", str(other))
    assert code == 6 and "--force" in err
    code, _, err = cairn(capsys, "bundle", "--recipe", TRAINING, "--out", str(other), "--force")
    assert code == 6 and (other / "keep.txt").read_text() == "mine"
    root = render(capsys, tmp_path / "b", TRAINING, "helm")
    render(capsys, root, INFERENCE, "flux", "--force")
    assert manifest(root)["recipe"] == INFERENCE and not (root / "deploy.sh").exists()
