"""The Kubernetes collector on recorded-shape API objects (tests/data/snapshot/k8s)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cairn.snapshot import make_snapshot
from cairn.snapshot.collectors import k8s

DATA = Path(__file__).resolve().parent.parent / "data" / "snapshot" / "k8s"
GPU_NODE = "ip-10-0-12-34.ec2.internal"
CPU_NODE = "ip-10-0-40-7.ec2.internal"


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def collect() -> k8s.ClusterCollected:
    return k8s.collect(
        version=load("version.json"),
        nodes=load("nodes.json")["items"],
        namespaces=["default", "gpu-operator", "kube-system"],
        deployments=load("deployments.json")["items"],
    )


def test_server_version_uses_aicr_names() -> None:
    cluster = collect().cluster
    assert cluster["K8s.server.version"] == "1.32.4"  # comparable with ">= 1.32.4"
    assert cluster["K8s.server.gitVersion"] == "v1.32.4-eks-a737599"
    assert cluster["K8s.server.goVersion"] == "go1.23.8"
    assert cluster["K8s.server.platform"] == "linux/amd64"


def test_gpu_node_readings() -> None:
    node = collect().nodes[GPU_NODE]
    assert node["K8s.node.kubelet-version"] == "v1.32.4-eks-a737599"
    assert node["K8s.node.kernel-version"] == "6.8.0-1024-aws"
    assert node["K8s.node.os-image"] == "Ubuntu 24.04.2 LTS"
    assert node["K8s.node.container-runtime-name"] == "containerd"
    assert node["K8s.node.container-runtime-version"] == "1.7.27"
    assert node["K8s.node.provider"] == "aws"
    assert node["K8s.node.gpu-allocatable"] == 8
    assert node["K8s.node.gpu-capacity"] == 8
    assert node["K8s.label.nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node["K8s.label.nvidia.com/gpu.count"] == "8"
    assert node["K8s.label.feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert "K8s.label.kubernetes.io/hostname" not in node  # only GPU-related labels
    assert node["K8s.taint.nvidia.com/gpu"] == "true:NoSchedule"
    assert node["K8s.node.taint-count"] == 1


def test_cpu_node_in_the_same_cluster_says_zero_gpus() -> None:
    node = collect().nodes[CPU_NODE]
    assert node["K8s.node.gpu-allocatable"] == 0
    assert node["K8s.node.gpu-capacity"] == 0
    assert node["K8s.node.taint-count"] == 0
    assert not any(key.startswith("K8s.label.") for key in node)


def test_operators_and_images() -> None:
    cluster = collect().cluster
    assert cluster["K8s.namespace.gpu-operator"] is True
    assert cluster["K8s.deployment.gpu-operator/gpu-operator"] == "1/1"
    assert cluster["K8s.image.nvcr.io/nvidia/gpu-operator"] == "v25.3.0"
    # The reading the catalog's GPU Operator floors test (mixins/gpu-operator-floor-*.yaml).
    assert cluster["Deployment.gpu-operator.version"] == "v25.3.0"
    assert cluster["K8s.image.602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/coredns"] == (
        "v1.11.4-eksbuild.2"
    )


def test_a_cluster_snapshot_puts_nodes_apart() -> None:
    result = collect()
    snap = make_snapshot(site="eks-a", cluster=result.cluster, nodes=result.nodes)
    assert [n.node for n in snap.nodes] == [GPU_NODE, CPU_NODE]
    assert snap.readings(CPU_NODE)["K8s.node.gpu-allocatable"] == 0
    assert snap.readings()["K8s.server.version"] == "1.32.4"


def test_a_broken_api_client_is_recorded_not_raised() -> None:
    class Broken:
        def sanitize_for_serialization(self, obj: object) -> object:
            raise ConnectionRefusedError("connection refused")

    result = k8s.collect(api_client=Broken())
    assert result.cluster == {} and result.nodes == {}
    assert result.errors[0].collector == "kubernetes"
