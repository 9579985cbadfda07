"""`cairn bundle explain` (which layer set each value) and `cairn bundle diff` (upgrades)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from cairn.bundles import BundleManifest, PlannedComponent, diff_bundles
from tests.unit.bundles_support import INFERENCE, RECIPES, TRAINING, cairn, render


def explain(capsys: pytest.CaptureFixture[str], root: Path, *extra: str) -> dict[str, Any]:
    code, out, err = cairn(capsys, "bundle", "explain", str(root), "-o", "json", *extra)
    assert code == 0, err
    rows = json.loads(out)["values"]
    return {f"{r['component']}:{r['path']}": r for r in rows}


def catalog_copy(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(RECIPES, target)
    return target


def edit(catalog: Path, rel: str, change: Any) -> None:
    path = catalog / rel
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def component(data: dict[str, Any], name: str) -> dict[str, Any]:
    found = next(c for c in data["components"] if c["name"] == name)
    assert isinstance(found, dict)
    return found


def test_every_value_names_its_layer(capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    catalog = catalog_copy(tmp_path, "recipes")
    # A mixin that sets a component value, to see the mixin layer.
    edit(catalog, "mixins/gpu-h100.yaml", lambda d: d.setdefault("components", []).append(
        {"name": "gpu-operator", "values": {"mig": {"strategy": "single"}}}))
    site = tmp_path / "site.yaml"
    site.write_text("gpu-operator:\n  toolkit:\n    enabled: false\n")
    root = render(capsys, tmp_path / "b", TRAINING, "helm", "--values", str(site),
                  "--set", "gpu-operator.driver.rdma.enabled=false", catalog=catalog)
    rows = explain(capsys, root)
    layer = {key: (r["layer"], r["source"]) for key, r in rows.items()}
    assert layer["gpu-operator:values.driver.kernelModuleType"] == ("base", "overlays/base.yaml")
    assert layer["gpu-operator:values.cdi.enabled"] == ("overlay",
                                                        "overlays/h100-eks-training.yaml")
    assert layer["gpu-operator:values.mig.strategy"] == ("mixin", "mixins/gpu-h100.yaml")
    assert layer["gpu-operator:values.toolkit.enabled"] == ("override", str(site))
    assert layer["gpu-operator:values.driver.rdma.enabled"] == ("set", "--set")
    assert layer["gpu-operator:version"] == ("base", "overlays/base.yaml")
    assert rows["gpu-operator:values.driver.rdma.enabled"]["value"] is False

    # Every value in the rendered values files has exactly one row, and recipe rows agree
    # with `cairn recipe explain`.
    for name in ("gpu-operator", "kube-prometheus-stack", "nvidia-dra-driver-gpu"):
        values = yaml.safe_load((root / name / "values.yaml").read_text())
        chart_key = next(iter(values))
        assert _leaves(values[chart_key]) == {
            k.split(":", 1)[1].removeprefix("values."): r["value"] for k, r in rows.items()
            if k.startswith(f"{name}:values.")}
    code, out, _ = cairn(capsys, "recipe", "explain", TRAINING, "--catalog", str(catalog),
                         "-o", "json")
    assert code == 0
    recipe_rows = {r["path"]: r["file"] for r in json.loads(out)["values"]}
    for key, row in rows.items():
        if row["layer"] in ("base", "overlay", "mixin"):
            comp, path = key.split(":", 1)
            assert recipe_rows[f"components.{comp}.{path}"] == row["source"], key


def _leaves(values: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(values, dict) and values:
        out: dict[str, Any] = {}
        for key, value in values.items():
            out.update(_leaves(value, f"{prefix}.{key}" if prefix else key))
        return out
    return {prefix: values}


def test_explain_one_component_and_the_table(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", INFERENCE, "argocd")
    rows = explain(capsys, root, "--component", "nvidia-dra-driver-gpu")
    assert {r["component"] for r in rows.values()} == {"nvidia-dra-driver-gpu"}
    assert rows["nvidia-dra-driver-gpu:values.gpuResourcesEnabledOverride"]["source"] == \
        "overlays/h100-eks-ubuntu-inference-dynamo.yaml"
    code, out, _ = cairn(capsys, "bundle", "explain", str(root), "--component", "nfd")
    assert code == 0 and "nfd" in out and "base" in out
    code, _, err = cairn(capsys, "bundle", "explain", str(root), "--component", "nope")
    assert code == 4 and "nope" in err


def test_diff_between_two_recipe_versions_names_exactly_what_changed(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    old_catalog = catalog_copy(tmp_path, "old")
    new_catalog = catalog_copy(tmp_path, "new")

    def upgrade_base(data: dict[str, Any]) -> None:
        component(data, "gpu-operator")["version"] = "v26.10.0"
        component(data, "kube-prometheus-stack")["version"] = "85.0.0"
        data["components"] = [c for c in data["components"] if c["name"] != "nvsentinel"]

    def change_eks(data: dict[str, Any]) -> None:
        spec = component(data, "kube-prometheus-stack")["values"]["prometheus"]["prometheusSpec"]
        spec["storageSpec"]["volumeClaimTemplate"]["spec"]["resources"]["requests"][
            "storage"] = "100Gi"
        spec["retention"] = "30d"
        data["components"].append({"name": "node-problem-detector",
                                   "chart": "deliveryhero/node-problem-detector",
                                   "repository": "https://charts.deliveryhero.io",
                                   "version": "2.4.1", "namespace": "kube-system"})

    edit(new_catalog, "overlays/base.yaml", upgrade_base)
    edit(new_catalog, "overlays/eks.yaml", change_eks)
    old = render(capsys, tmp_path / "b-old", TRAINING, "flux", catalog=old_catalog)
    new = render(capsys, tmp_path / "b-new", TRAINING, "flux", catalog=new_catalog)

    code, out, _ = cairn(capsys, "bundle", "diff", str(old), str(new), "-o", "json")
    assert code == 0
    diff = json.loads(out)
    assert diff["added"] == ["node-problem-detector"]
    assert diff["removed"] == ["nvsentinel"]
    changed = {c["name"]: c for c in diff["changed"]}
    assert set(changed) == {"gpu-operator", "kube-prometheus-stack"}
    assert changed["gpu-operator"] == {"name": "gpu-operator",
                                       "fields": {"version": ["v26.7.0", "v26.10.0"]},
                                       "values": []}
    assert changed["kube-prometheus-stack"]["fields"] == {"version": ["84.4.0", "85.0.0"]}
    prefix = "prometheus.prometheusSpec."
    assert changed["kube-prometheus-stack"]["values"] == [
        {"path": prefix + "retention", "old": None, "new": "30d", "change": "added"},
        {"path": prefix + "storageSpec.volumeClaimTemplate.spec.resources.requests.storage",
         "old": "50Gi", "new": "100Gi", "change": "changed"},
    ]

    assert [(r["component"], r["risk"]) for r in diff["risks"]] == [
        ("kube-prometheus-stack", "major-version"), ("nvsentinel", "removed")]

    code, text, _ = cairn(capsys, "bundle", "diff", str(old), str(new))
    assert code == 0
    assert "### Upgrade risks" in text and "| nvsentinel | removed |" in text
    assert "### Components added\n\n- `node-problem-detector`" in text
    assert "### Components removed\n\n- `nvsentinel`" in text
    assert "| gpu-operator | v26.7.0 | v26.10.0 |" in text
    assert "| kube-prometheus-stack | `" + prefix + "retention` | (absent) | `\"30d\"` |" in text

    code, text, _ = cairn(capsys, "bundle", "diff", str(old), str(old))
    assert code == 0 and text.startswith("No changes")


def test_diff_of_a_directory_that_is_not_a_bundle(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", TRAINING, "helm")
    (tmp_path / "empty").mkdir()
    code, _, err = cairn(capsys, "bundle", "diff", str(tmp_path / "empty"), str(root))
    assert code == 4 and "bundle.yaml" in err
    (root / "bundle.yaml").write_text("recipe: x\nsurprise: 1\n")
    code, _, err = cairn(capsys, "bundle", "diff", str(root), str(root))
    assert code == 3 and "bundle.yaml" in err and "Traceback" not in err


def _manifest(*components: PlannedComponent) -> BundleManifest:
    return BundleManifest(recipe="r", applied=["base"], deployer="helm",
                          components=list(components))


def _component(name: str, version: str, namespace: str = "ns",
               chart: str = "repo/chart") -> PlannedComponent:
    return PlannedComponent(name=name, chart=chart, repository="https://charts.example.com",
                            version=version, namespace=namespace)


def test_upgrade_risks_name_what_an_upgrade_could_destroy() -> None:
    old = _manifest(_component("moved", "1.0.0"), _component("rolled-back", "v2.3.0"),
                    _component("zero-minor", "v0.16.9"), _component("zero-patch", "0.5.0"),
                    _component("swapped", "1.0.0"), _component("gone", "1.0.0"))
    new = _manifest(_component("moved", "1.0.1", namespace="other"),
                    _component("rolled-back", "v2.2.9"), _component("zero-minor", "v0.17.0"),
                    _component("zero-patch", "0.5.1"),
                    _component("swapped", "1.0.0", chart="repo/another"))
    risks = {(r.component, r.risk) for r in diff_bundles(old, new).risks}
    assert risks == {("gone", "removed"), ("moved", "namespace-changed"),
                     ("rolled-back", "downgrade"), ("zero-minor", "major-version"),
                     ("swapped", "chart-changed")}
    assert diff_bundles(old, old).risks == []
