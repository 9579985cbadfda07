"""`cairn recipe --data`, `--format aicr`, `--criteria`, `recipe import`, `bundle --from`,
`validate --snapshot` and `snapshot --format aicr`, on AICR-format data written for the tests
(tests/fixtures/aicr_data.py), with no federation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from cairn.recipes import Criteria, load_catalog, resolve
from tests.cli_runner import cairn
from tests.fixtures.aicr_data import (
    API,
    CRITERIA_FILE,
    write_generated_catalog,
    write_small_catalog,
)

QUERY = ("--service", "eks", "--accelerator", "h100", "--os", "ubuntu", "--intent", "training")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_catalog(tmp_path_factory.mktemp("aicr") / "data")


def show(*args: str) -> tuple[int, str, str]:
    return cairn("recipe", "show", *args)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_show_writes_exactly_one_recipe_result(data: Path, fmt: str) -> None:
    code, out, err = show("--data", str(data), *QUERY, "--platform", "kubeflow",
                          "--format", "aicr", "-o", fmt)
    assert code == 0, err
    docs = [json.loads(out)] if fmt == "json" else list(yaml.safe_load_all(out))
    assert len(docs) == 1
    doc = docs[0]
    assert (doc["kind"], doc["apiVersion"]) == ("RecipeResult", API)
    assert set(doc) >= {"criteria", "constraints", "componentRefs", "deploymentOrder",
                        "validation", "metadata"}
    assert doc["metadata"]["appliedOverlays"][-1] == "h100-eks-ubuntu-training-kubeflow"
    assert doc["criteria"]["platform"] == "kubeflow"
    assert doc["deploymentOrder"][-1] == "gpu-operator"


def test_a_criteria_file_in_yaml_or_json_and_flags_override_it(data: Path,
                                                               tmp_path: Path) -> None:
    as_yaml = tmp_path / "c.yaml"
    as_yaml.write_text(yaml.safe_dump(CRITERIA_FILE))
    as_json = tmp_path / "c.json"
    as_json.write_text(json.dumps(CRITERIA_FILE))
    for path in (as_yaml, as_json):
        code, out, err = show("--data", str(data), "--criteria", str(path), "-o", "json")
        assert code == 0, err
        assert json.loads(out)["metadata"]["appliedOverlays"][-1] == "h100-eks-ubuntu-training"
    code, out, _ = show("--data", str(data), "--criteria", str(as_yaml), "--platform",
                        "kubeflow", "-o", "json")
    assert json.loads(out)["criteria"]["platform"] == "kubeflow"
    code, out, _ = show("--data", str(data), "--criteria", str(as_yaml), "--intent",
                        "inference", "-o", "json")
    assert json.loads(out)["metadata"]["appliedOverlays"] == ["base", "eks",
                                                              "h100-any-inference"]


@pytest.mark.parametrize(("key", "value", "field"), [
    ("kind", "RecipeMetadata", "kind"), ("apiVersion", "example.com/v9", "apiVersion")])
def test_a_criteria_file_of_the_wrong_kind_or_api_version_is_refused(
        data: Path, tmp_path: Path, key: str, value: str, field: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**CRITERIA_FILE, key: value}))
    for extra in (["--data", str(data)], []):
        code, out, err = show(*extra, "--criteria", str(bad), "--no-federation")
        assert code == 3 and out == ""
        assert err.count("\n") == 1 and str(bad) in err and field in err, err


def _tree(tmp_path: Path) -> Path:
    return write_small_catalog(tmp_path / "data")


def test_data_errors_are_one_line_and_exit_3(tmp_path: Path) -> None:
    cases: list[tuple[Path, str]] = [(tmp_path / "missing", "no such data directory")]
    bare = tmp_path / "bare"
    (bare / "overlays").mkdir(parents=True)
    cases.append((bare, "no registry.yaml"))
    traversal = _tree(tmp_path / "t")
    (traversal.parent / "secret.yaml").write_text("password: x\n")
    eks = traversal / "overlays" / "eks.yaml"
    eks.write_text(eks.read_text().replace("components/aws-ebs-csi-driver/values.yaml",
                                           "../secret.yaml"))
    cases.append((traversal, "inside the data directory"))
    linked = _tree(tmp_path / "l")
    (linked / "components" / "outside.yaml").symlink_to("/etc/hostname")
    cases.append((linked, "symlink"))
    big = _tree(tmp_path / "b")
    with (big / "components" / "cert-manager" / "huge.yaml").open("wb") as f:
        f.truncate(10 * 1024 * 1024 + 1)
    cases.append((big, "larger than the limit"))
    for root, message in cases:
        code, out, err = show("--data", str(root), "--service", "eks")
        assert code == 3, (root, err)
        assert out == "" and err.count("\n") == 1 and message in err, (root, err)
        assert "Traceback" not in err


def test_partial_data_is_layered_on_cairns_catalog(tmp_path: Path) -> None:
    # No overlays/base.yaml: the directory goes on top of Cairn's own catalog. Its registry
    # entry for cert-manager replaces Cairn's (by name); its overlay adds a component.
    root = tmp_path / "layer"
    (root / "overlays").mkdir(parents=True)
    (root / "registry.yaml").write_text(yaml.safe_dump({
        "apiVersion": API, "kind": "ComponentRegistry", "components": [
            {"name": "cert-manager", "helm": {"defaultRepository": "https://mirror.example/charts",
                                              "defaultChart": "mirror/cert-manager",
                                              "defaultNamespace": "certs"}},
            {"name": "site-tools", "helm": {"defaultRepository": "https://tools.example",
                                            "defaultChart": "site-tools",
                                            "defaultVersion": "1.2.3"}}]}))
    (root / "overlays" / "eks-site.yaml").write_text(yaml.safe_dump({
        "kind": "RecipeMetadata", "apiVersion": API, "metadata": {"name": "eks-site"},
        "spec": {"base": "eks", "criteria": {"service": "eks"},
                 "componentRefs": [{"name": "site-tools", "type": "Helm"}]}}))
    code, out, err = show("--data", str(root), "--service", "eks", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    refs = {r["name"]: r for r in doc["componentRefs"]}
    assert refs["site-tools"]["version"] == "1.2.3"
    assert refs["cert-manager"]["source"] == "https://mirror.example/charts"
    # gpu-operator comes from Cairn's base recipe, its chart source from the lower registry.
    assert refs["gpu-operator"]["source"] == "https://helm.ngc.nvidia.com/nvidia"
    assert doc["metadata"]["appliedOverlays"][:2] == ["base", "eks"]
    assert doc["metadata"]["appliedOverlays"][-1] == "eks-site"


def test_cairns_own_recipe_in_aicrs_shape() -> None:
    code, out, err = show("h100-eks-ubuntu-training", "--format", "aicr", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    recipe = resolve(load_catalog(), "h100-eks-ubuntu-training")
    assert doc["kind"] == "RecipeResult"
    assert sorted(doc["deploymentOrder"]) == sorted(c.name for c in recipe.components)
    assert {c["name"]: c["value"] for c in doc["constraints"]} == {
        c.name: c.value for c in recipe.constraints}


def test_every_leaf_of_a_catalog_resolves_and_bundles(tmp_path: Path) -> None:
    root = tmp_path / "data"
    leaves = write_generated_catalog(root)
    assert len(leaves) == 16 and len(list((root / "overlays").glob("*.yaml"))) == 47
    for index, criteria in enumerate(leaves):
        args = [a for k, v in criteria.items() for a in (f"--{k}", v)]
        code, out, err = show("--data", str(root), *args, "-o", "yaml")
        assert code == 0, err
        doc = yaml.safe_load(out)
        leaf = f"{criteria['accelerator']}-{criteria['service']}-ubuntu-{criteria['intent']}"
        assert doc["metadata"]["appliedOverlays"][-1] == leaf
        recipe = tmp_path / f"r{index}.yaml"
        recipe.write_text(out)
        bundle = tmp_path / f"b{index}"
        code, _, err = cairn("bundle", "--from", str(recipe), "--data", str(root),
                             "--deployer", "helm", "--out", str(bundle))
        assert code == 0, err
        for name in ("deploy.sh", "undeploy.sh", "README.md", "recipe.yaml", "checksums.txt"):
            assert (bundle / name).is_file(), (leaf, name)
        assert os.access(bundle / "deploy.sh", os.X_OK)
        for component in doc["deploymentOrder"]:
            assert (bundle / component / "values.yaml").is_file(), (leaf, component)
            assert f"==> {component} " in (bundle / "deploy.sh").read_text()
        assert (bundle / "skyhook-customizations" / "manifests" / "tuning.yaml").is_file()
        values = yaml.safe_load((bundle / "gpu-operator" / "values.yaml").read_text())
        assert values["accelerator"] == criteria["accelerator"]
        assert yaml.safe_load((bundle / "recipe.yaml").read_text()) == doc
        assert cairn("bundle", "verify", str(bundle))[0] == 0


def test_bundle_from_a_recipe_file_for_other_deployers(data: Path, tmp_path: Path) -> None:
    code, out, _ = show("h100-eks-ubuntu-training", "-o", "yaml", "--no-federation")
    assert code == 0
    cairn_recipe = tmp_path / "cairn.yaml"
    cairn_recipe.write_text(out)
    for deployer in ("flux", "k0rdent", "pulumi"):
        code, _, err = cairn("bundle", "--from", str(cairn_recipe), "--deployer", deployer,
                             "--out", str(tmp_path / deployer))
        assert code == 0, (deployer, err)
        assert (tmp_path / deployer / "bundle.yaml").is_file()
    # k0rdent's default cluster selector comes from the recipe file's criteria.
    assert "cairn.dev/accelerator=h100" in (tmp_path / "k0rdent" / "README.md").read_text()
    # An AICR recipe whose components all have charts renders for argocd too, as Cairn
    # renders it; a manifest-only component is refused there with one line.
    code, out, _ = show("--data", str(data), *QUERY, "-o", "yaml")
    aicr_recipe = tmp_path / "aicr.yaml"
    aicr_recipe.write_text(out)
    code, _, err = cairn("bundle", "--from", str(aicr_recipe), "--data", str(data),
                         "--deployer", "argocd", "--repo-url", "https://git.example/x",
                         "--out", str(tmp_path / "argo"))
    assert code == 3 and "skyhook-customizations" in err and err.count("\n") == 1
    # Without the data its values files come from, the helm bundle says what is missing.
    code, _, err = cairn("bundle", "--from", str(aicr_recipe), "--out", str(tmp_path / "h"))
    assert code == 3 and "--data DIR" in err


def test_import_carries_what_fits_and_lists_the_rest(data: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "catalog"
    code, out, err = cairn("recipe", "import", str(data), "--out", str(out_dir), "-o", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["overlays"] == 9 and report["mixins"] == 1
    lost = "\n".join(report["not_carried"])
    assert "manifestFiles" in lost and "skyhook-customizations: no chart" in lost
    assert "eks-training.yaml: componentRefs.gpu-operator.valuesFile" in lost
    imported = resolve(load_catalog(out_dir), Criteria(service="eks", accelerator="h100",
                                                       os="ubuntu", intent="training"))
    code, out, _ = show("--data", str(data), *QUERY, "-o", "json")
    aicr = json.loads(out)
    # Where the models agree, the two resolutions agree.
    assert {c.name: c.value for c in imported.constraints} == {
        c["name"]: c["value"] for c in aicr["constraints"]}
    assert {c.name: c.version for c in imported.components} == {
        r["name"]: r.get("version", "") for r in aicr["componentRefs"]}
    assert imported.component("gpu-operator") is not None
    assert imported.component("gpu-operator").values["cdi"] == {"enabled": True}  # type: ignore[union-attr]
    assert cairn("recipe", "import", str(data), "--out", str(out_dir))[0] == 6


def _snapshot(tmp_path: Path, os_id: str) -> Path:
    path = tmp_path / f"snap-{os_id}.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "Snapshot", "apiVersion": API,
        "metadata": {"timestamp": "2026-03-01T10:00:00Z", "source-node": "gpu-1"},
        "measurements": [
            {"type": "K8s", "subtypes": [{"subtype": "server", "data": {"version": "1.33.2"}}]},
            {"type": "OS", "subtypes": [
                {"subtype": "release", "data": {"ID": os_id, "VERSION_ID": "24.04"}},
                {"subtype": "sysctl", "data": {"/proc/sys/kernel/osrelease": "6.8.0-1024-aws"}}]},
            {"type": "GPU", "subtypes": [{"subtype": "smi", "data": {"gpu.model": "H100"}}]}]}))
    return path


def test_validate_offline_against_an_aicr_snapshot(data: Path, tmp_path: Path) -> None:
    code, out, _ = show("--data", str(data), *QUERY, "-o", "yaml")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(out)
    env: dict[str, str | None] = {"CAIRN_NATS_URL": "nats://127.0.0.1:1", "CAIRN_CONTEXT": None}
    code, out, err = cairn("validate", "--snapshot", str(_snapshot(tmp_path, "ubuntu")),
                           "--recipe", str(recipe), "-o", "json", env=env)
    assert code == 0, err + out
    verdict = json.loads(out)
    assert verdict["status"] == "passed" and verdict["offline"] is True
    assert verdict["phases"]["deployment"]["status"] == "not-run"
    code, out, _ = cairn("validate", "--snapshot", str(_snapshot(tmp_path, "rhel")),
                         "--recipe", str(recipe), "-o", "json", env=env)
    assert code == 1
    failed = {c["name"]: c["status"] for c in
              json.loads(out)["phases"]["readiness"]["constraints"]}
    assert failed["OS.release.ID"] == "failed" and failed["K8s.server.version"] == "passed"


def test_snapshot_in_aicrs_format_reads_back(tmp_path: Path) -> None:
    out_file = tmp_path / "snap.yaml"
    code, out, err = cairn("snapshot", "--format", "aicr", "--out", str(out_file), "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["kind"], doc["apiVersion"]) == ("Snapshot", API)
    assert yaml.safe_load(out_file.read_text()) == doc
    from cairn.recipes.aicr.snapshots import read_snapshot

    snap = read_snapshot(out_file)
    assert snap.nodes[0].node == doc["metadata"]["source-node"]
    os_type = next(m for m in doc["measurements"] if m["type"] == "OS")
    release = next(s for s in os_type["subtypes"] if s["subtype"] == "release")
    assert snap.readings(snap.nodes[0].node)["OS.release.ID"] == release["data"]["ID"]


@pytest.mark.parametrize(("change", "message"), [
    ({"componentRefs": [{"name": "../../evil", "type": "Helm"}]}, "not a valid component name"),
    ({"componentRefs": [{"name": "a", "valuesFile": "/etc/passwd"}]}, "inside the data"),
    ({"componentRefs": [{"name": "a", "dependencyRefs": ["b"]}]}, "depends on 'b'"),
    ({"componentRefs": "not-a-list"}, "componentRefs"),
    ({"kind": "RecipeMetadata"}, "expected 'RecipeResult'"),
    ({"apiVersion": "v1"}, "unknown apiVersion"),
])
def test_a_hostile_recipe_file_is_one_line_and_nothing_is_written(
        tmp_path: Path, change: dict[str, object], message: str) -> None:
    doc = {"kind": "RecipeResult", "apiVersion": API, "criteria": {"service": "eks"},
           "componentRefs": [], "deploymentOrder": [], **change}
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    code, stdout, err = cairn("bundle", "--from", str(recipe), "--out", str(out))
    assert code == 3 and stdout == "" and err.count("\n") == 1, err
    assert message in err and str(recipe) in err
    assert not out.exists() and not (tmp_path.parent / "evil").exists()


def test_an_overlay_name_that_is_not_a_name_is_refused(tmp_path: Path) -> None:
    root = write_small_catalog(tmp_path / "d")
    eks = root / "overlays" / "eks.yaml"
    eks.write_text(eks.read_text().replace("name: eks\n", "name: ../eks\n", 1))
    code, _, err = cairn("recipe", "import", str(root), "--out", str(tmp_path / "c"))
    assert code == 3 and "eks.yaml: metadata.name" in err and err.count("\n") == 1
    assert not (tmp_path / "c").exists()


def _edit_eks(root: Path, edit: dict[str, object]) -> None:
    path = root / "overlays" / "eks.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"].update(edit)
    path.write_text(yaml.safe_dump(doc))


@pytest.mark.parametrize(("edit", "message"), [
    ({"base": "nope"}, "eks.yaml: spec.base: unknown base recipe 'nope'"),
    ({"base": "h100-eks-training"}, "base cycle"),
    ({"mixins": ["os-nowhere"]}, "eks.yaml: spec.mixins[0]: unknown mixin"),
    ({"criteria": {"nodes": "many"}}, "spec.criteria.nodes"),
    ({"componentRefs": [{"name": "x", "manifestFiles": ["components/none.yaml"]}]},
     "is not in the recipe data"),
])
def test_a_malformed_overlay_is_one_line_naming_file_and_field(
        tmp_path: Path, edit: dict[str, object], message: str) -> None:
    root = write_small_catalog(tmp_path / "d")
    _edit_eks(root, edit)
    code, out, err = show("--data", str(root), "--service", "eks")
    assert code == 3 and out == "" and err.count("\n") == 1 and message in err, err


def test_diff_reads_aicr_snapshots(tmp_path: Path) -> None:
    before = _snapshot(tmp_path, "ubuntu")
    after = tmp_path / "after.yaml"
    after.write_text(_snapshot(tmp_path, "rhel").read_text())
    code, out, err = cairn("diff", str(before), str(after), "-o", "json")
    assert code == 1, err
    assert [(c["path"], c["before"], c["after"]) for c in json.loads(out)] == [
        ("OS.release.ID", "ubuntu", "rhel")]


def test_a_complete_data_directory_needs_no_cairn_catalog(data: Path, tmp_path: Path) -> None:
    env: dict[str, str | None] = {"CAIRN_RECIPES": str(tmp_path / "no-catalog-here")}
    assert cairn("recipe", "list", env=env)[0] == 3  # Cairn's own catalog is not there
    code, out, err = cairn("recipe", "show", "--data", str(data), *QUERY, "-o", "json", env=env)
    assert code == 0, err
    assert json.loads(out)["metadata"]["appliedOverlays"][0] == "base"


def test_an_aicr_layout_bundle_can_be_signed_and_verified(data: Path, tmp_path: Path) -> None:
    assert cairn("keys", "create", "signer", "--dir", str(tmp_path / "k"))[0] == 0
    code, out, _ = show("--data", str(data), *QUERY, "-o", "yaml")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(out)
    bundle = tmp_path / "b"
    code, _, err = cairn("bundle", "--from", str(recipe), "--data", str(data), "--out",
                         str(bundle), "--sign", str(tmp_path / "k" / "signer.key"))
    assert code == 0, err
    assert cairn("bundle", "verify", str(bundle), "--key", str(tmp_path / "k" / "signer.pub")
                 )[0] == 0
    (bundle / "gpu-operator" / "values.yaml").write_text("driver: {enabled: false}\n")
    assert cairn("bundle", "verify", str(bundle))[0] == 9


def test_list_data_overlays_by_their_own_criteria(data: Path) -> None:
    code, out, err = cairn("recipe", "list", "--data", str(data), "--service", "eks",
                           "--accelerator", "h100", "-o", "json")
    assert code == 0, err
    assert [r["name"] for r in json.loads(out)] == [
        "h100-eks-training", "h100-eks-ubuntu-training", "h100-eks-ubuntu-training-kubeflow"]
    code, out, _ = cairn("recipe", "list", "--data", str(data), "--mixins", "-o", "json")
    kinds = {r["name"]: r["kind"] for r in json.loads(out)}
    assert kinds["os-ubuntu"] == "mixin" and kinds["base"] == "overlay" and len(kinds) == 10


def test_validate_offline_a_catalog_recipe_by_name(tmp_path: Path) -> None:
    code, out, err = cairn("validate", "--snapshot", str(_snapshot(tmp_path, "ubuntu")),
                           "--recipe", "h100-eks-ubuntu-tr", "-o", "json")
    assert code == 3 and "ambiguous" in err  # a prefix two recipes share
    code, out, err = cairn("validate", "--snapshot", str(_snapshot(tmp_path, "ubuntu")),
                           "--recipe", "h100-eks-ubuntu-training", "-o", "json")
    verdict = json.loads(out)
    assert verdict["recipe"] == "h100-eks-ubuntu-training"
    statuses = {c["name"]: c["status"] for c in verdict["phases"]["readiness"]["constraints"]}
    assert statuses["OS.release.ID"] == "passed"
    assert code == (0 if verdict["status"] == "passed" else 1)


def test_a_snapshot_without_aicrs_header_reads(tmp_path: Path) -> None:
    from cairn.recipes.aicr.snapshots import read_snapshot

    path = tmp_path / "bare.yaml"
    path.write_text("measurements:\n  - type: K8s\n    subtypes:\n      - subtype: server\n"
                    "        data: {version: v1.33.0}\n")
    assert read_snapshot(path).readings()["K8s.server.version"] == "v1.33.0"
