"""AICR-format data resolved by AICR's rules: every expected value below is derived by hand
from AICR's documented matching and merge rules (docs/recipes.md, "Using AICR recipe data")
for the hand-written catalog in tests/fixtures/aicr_data.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.errors import InvalidInput
from cairn.recipes.aicr import AicrCriteria, load_aicr_catalog, resolve
from cairn.recipes.aicr.catalog import AicrCatalog
from cairn.recipes.aicr.convert import component_values
from cairn.recipes.aicr.model import ComponentRef
from cairn.recipes.aicr.resolve import deployment_order, match
from tests.fixtures.aicr_data import write_small_catalog


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> AicrCatalog:
    return load_aicr_catalog(write_small_catalog(tmp_path_factory.mktemp("aicr")))


def q(**fields: str) -> AicrCriteria:
    return AicrCriteria(**fields)


H100_EKS_UBUNTU = q(service="eks", accelerator="h100", os="ubuntu", intent="training")


def test_matching_is_asymmetric_and_ordered_by_specificity_then_name(
        catalog: AicrCatalog) -> None:
    # eks (1 field), eks-training and h100-any-training (2, by name), h100-eks-training (3),
    # h100-eks-ubuntu-training (4); not gke-cos, not h100-any-inference, not the kubeflow leaf
    # (its platform is set, the query's is any).
    assert match(catalog, H100_EKS_UBUNTU) == [
        "eks", "eks-training", "h100-any-training", "h100-eks-training",
        "h100-eks-ubuntu-training"]
    # A query-side wildcard matches only wildcard overlays: no H100 overlay for "any GPU".
    assert match(catalog, q(service="eks", intent="training")) == ["eks", "eks-training"]
    # A recipe-side wildcard matches every value: h100-any-training reaches any service.
    assert match(catalog, q(service="gke", os="cos", accelerator="h100", intent="training")
                 ) == ["gke-cos", "h100-any-training"]
    # Aliases and case: AL2023 is amazonlinux, EKS is eks.
    assert match(catalog, q(service="EKS")) == ["eks"]


def test_the_h100_eks_ubuntu_training_result_case_by_case(catalog: AicrCatalog) -> None:
    result = resolve(catalog, H100_EKS_UBUNTU)
    assert result.kind == "RecipeResult" and result.api_version == "aicr.nvidia.com/v1alpha1"
    # base first, then each match's chain once: h100-eks-training's chain (eks, eks-training)
    # is already applied by the time it comes.
    assert result.metadata.applied_overlays == [
        "base", "eks", "eks-training", "h100-any-training", "h100-eks-training",
        "h100-eks-ubuntu-training"]
    assert result.metadata.applied_mixins == ["os-ubuntu"]
    assert (result.criteria.service, result.criteria.platform) == ("eks", "any")
    # Constraints replace by name, last writer wins; the mixin is merged after the chains,
    # so its kernel floor (>= 6.8) replaces the wildcard overlay's (>= 5.15).
    assert [(c.name, c.value) for c in result.constraints] == [
        ("GPU.smi.gpu.model", "H100"),
        ("K8s.server.version", ">= 1.32.4"),
        ("OS.release.ID", "ubuntu"),
        ("OS.release.VERSION_ID", "24.04"),
        ("OS.sysctl./proc/sys/kernel/osrelease", ">= 6.8"),
    ]
    assert [r.name for r in result.component_refs] == [
        "aws-ebs-csi-driver", "cert-manager", "gpu-operator", "kube-prometheus-stack",
        "prometheus-adapter", "skyhook-customizations", "skyhook-operator"]
    # Kahn's order, always the ready component with the smallest name.
    assert result.deployment_order == [
        "aws-ebs-csi-driver", "cert-manager", "kube-prometheus-stack", "prometheus-adapter",
        "skyhook-operator", "skyhook-customizations", "gpu-operator"]
    assert result.validation is not None
    assert result.validation.deployment is not None
    assert result.validation.deployment.checks == ["operator-health", "gpu-operator-version"]
    # eks's conformance phase survives: no later overlay declares that phase.
    assert result.validation.conformance is not None
    assert result.validation.conformance.checks == ["platform-health", "gpu-operator-health"]


def test_component_refs_merge_field_by_field_and_take_registry_defaults(
        catalog: AicrCatalog) -> None:
    gpu = resolve(catalog, H100_EKS_UBUNTU).ref("gpu-operator")
    assert gpu is not None
    # version from base, valuesFile from eks-training, dependencyRefs replaced and overrides
    # merged by h100-eks-training, the manifest from base kept; source, chart (its last path
    # segment) and namespace from the registry.
    assert gpu.version == "v25.10.1"
    assert gpu.values_file == "components/gpu-operator/values-eks-training.yaml"
    assert gpu.dependency_refs == ["cert-manager", "kube-prometheus-stack",
                                   "skyhook-customizations"]
    assert gpu.overrides == {"cdi": {"enabled": True}, "gdrcopy": {"enabled": True}}
    assert gpu.manifest_files == ["components/gpu-operator/manifests/dcgm-exporter.yaml"]
    assert (gpu.source, gpu.chart, gpu.namespace) == (
        "https://helm.ngc.nvidia.com/nvidia", "gpu-operator", "gpu-operator")
    # The component's values.yaml, then the values file, then the overrides.
    assert component_values(gpu, catalog.data.files) == {
        "driver": {"enabled": True, "version": "580.105.08", "installDir": "/run/nvidia/driver"},
        "toolkit": {"enabled": True}, "cdi": {"enabled": True}, "gdrcopy": {"enabled": True}}
    kps = resolve(catalog, H100_EKS_UBUNTU).ref("kube-prometheus-stack")
    assert kps is not None and kps.version == "82.8.0"  # the registry's default version
    assert component_values(kps, catalog.data.files) == {
        "prometheus": {"retention": "15d", "storageClass": "gp2", "size": "50Gi"}}


def test_the_kubeflow_leaf_adds_a_component_and_replaces_a_phase(catalog: AicrCatalog) -> None:
    result = resolve(catalog, q(service="eks", accelerator="h100", os="ubuntu",
                                intent="training", platform="kubeflow"))
    assert result.metadata.applied_overlays[-1] == "h100-eks-ubuntu-training-kubeflow"
    assert "kubeflow-trainer" in result.deployment_order
    order = result.deployment_order
    assert order.index("cert-manager") < order.index("kubeflow-trainer")
    assert result.validation is not None and result.validation.conformance is not None
    assert result.validation.conformance.checks == ["robust-controller"]


def test_a_query_nothing_matches_is_base_alone(catalog: AicrCatalog) -> None:
    result = resolve(catalog, q(service="oke"))
    assert result.metadata.applied_overlays == ["base"]
    assert [c.value for c in result.constraints] == [">= 1.25"]


def test_dependency_checks_refuse_unknown_refs_and_cycles() -> None:
    with pytest.raises(InvalidInput, match="depends on 'nope'"):
        deployment_order([ComponentRef(name="a", dependency_refs=["nope"])])
    with pytest.raises(InvalidInput, match="dependency cycle among a, b"):
        deployment_order([ComponentRef(name="a", dependency_refs=["b"]),
                          ComponentRef(name="b", dependency_refs=["a"])])


def test_a_snapshot_judge_excludes_overlays_whose_constraints_fail(catalog: AicrCatalog) -> None:
    def judge(constraint: object) -> tuple[bool, str]:
        name = getattr(constraint, "name", "")
        # The cluster runs 1.31: eks-training (>= 1.30) holds, h100-eks-training (>= 1.32.4)
        # does not; the wildcard's GPU model holds.
        if name == "K8s.server.version":
            value = getattr(constraint, "value", "")
            return value in (">= 1.25", ">= 1.28", ">= 1.30"), "1.31"
        return True, "H100"

    result = resolve(catalog, H100_EKS_UBUNTU, judge)
    assert [e.name for e in result.metadata.excluded_overlays] == [
        "h100-eks-training", "h100-eks-ubuntu-training"]
    # An excluded match is not merged; its ancestors stay only where another match reaches
    # them (eks-training is a match of its own).
    assert result.metadata.applied_overlays == ["base", "eks", "eks-training",
                                                "h100-any-training"]
    assert result.metadata.constraint_warnings[0].actual == "1.31"


def test_a_mixin_named_by_an_overlay_must_exist(tmp_path: Path) -> None:
    root = write_small_catalog(tmp_path / "d")
    (root / "mixins" / "os-ubuntu.yaml").unlink()
    with pytest.raises(InvalidInput, match="unknown mixin 'os-ubuntu'") as err:
        load_aicr_catalog(root)
    assert err.value.file is not None and err.value.file.endswith("h100-eks-ubuntu-training.yaml")


def test_the_docs_example_is_the_tested_data(tmp_path: Path) -> None:
    written = write_small_catalog(tmp_path / "d")
    example = Path(__file__).resolve().parents[2] / "examples" / "aicr-data"
    files = sorted(p.relative_to(written) for p in written.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(example) for p in example.rglob("*") if p.is_file())
    for rel in files:
        assert (written / rel).read_bytes() == (example / rel).read_bytes(), rel


def test_a_failing_mixin_constraint_excludes_only_the_matches_whose_chain_names_it(
        catalog: AicrCatalog) -> None:
    def judge(constraint: object) -> tuple[bool, str]:
        if getattr(constraint, "name", "") == "OS.release.ID":
            return False, "rhel"
        return True, "ok"

    result = resolve(catalog, q(service="eks", accelerator="h100", os="ubuntu",
                                intent="training", platform="kubeflow"), judge)
    assert [(e.name, e.reason) for e in result.metadata.excluded_overlays] == [
        ("h100-eks-ubuntu-training", "mixin-constraint-failed"),
        ("h100-eks-ubuntu-training-kubeflow", "mixin-constraint-failed")]
    # The unrelated matches stay, and the mixin is not applied.
    assert result.metadata.applied_overlays == [
        "base", "eks", "eks-training", "h100-any-training", "h100-eks-training"]
    assert result.metadata.applied_mixins == []
    assert {w.constraint for w in result.metadata.constraint_warnings} == {"OS.release.ID"}


def test_a_recipe_file_with_aicrs_older_excluded_overlays_reads(tmp_path: Path) -> None:
    from cairn.recipes.aicr.convert import read_recipe_file

    path = tmp_path / "r.yaml"
    path.write_text("kind: RecipeResult\napiVersion: aicr.nvidia.com/v1alpha1\n"
                    "metadata: {appliedOverlays: [base], excludedOverlays: [eks, {name: x, "
                    "reason: mixin-constraint-failed}]}\ncriteria: {service: eks}\n"
                    "componentRefs: []\ndeploymentOrder: []\n")
    result = read_recipe_file(path)
    assert [(e.name, e.reason) for e in result.metadata.excluded_overlays] == [
        ("eks", "constraint-failed"), ("x", "mixin-constraint-failed")]


def test_a_query_value_must_be_aicrs_or_one_the_data_uses(catalog: AicrCatalog) -> None:
    with pytest.raises(InvalidInput, match="unknown service 'nosuch'; allowed: any, aks"):
        resolve(catalog, q(service="nosuch"))
    # rke2 is AICR's though no overlay here uses it: base alone.
    assert resolve(catalog, q(service="rke2")).metadata.applied_overlays == ["base"]


def test_a_value_an_overlay_registers_is_a_valid_query(tmp_path: Path) -> None:
    root = write_small_catalog(tmp_path / "d")
    eks = root / "overlays" / "eks.yaml"
    eks.write_text(eks.read_text().replace("service: eks", "service: togetherai"))
    catalog = load_aicr_catalog(root)
    assert match(catalog, q(service="togetherai")) == ["eks"]
