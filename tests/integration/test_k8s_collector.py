"""A Kubernetes site's snapshotter reads its cluster's facts (kmock's nodes) through the API
that its site.yaml names."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("kubernetes", reason="pip install -e '.[kubernetes]' (the official client)")
kmock = pytest.importorskip("kmock", reason="pip install -e '.[dev]' (kmock: the test API)")

from cairn.snapshot import flatten  # noqa: E402
from cairn.snapshot.collectors import k8s  # noqa: E402
from cairn.snapshotter.service import SnapshotterService  # noqa: E402
from cairn.spec.site import KubernetesCluster  # noqa: E402

GPU_NODE = {
    "metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                  "kubernetes.io/os": "linux"}},
    "spec": {"providerID": "aws:///us-east-1a/i-0abc",
             "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "96"},
               "allocatable": {"nvidia.com/gpu": "8", "cpu": "95"},
               "nodeInfo": {"kubeletVersion": "v1.31.2", "containerRuntimeVersion":
                            "containerd://1.7.22", "osImage": "Ubuntu 22.04.5 LTS",
                            "kernelVersion": "6.8.0-1015-aws", "architecture": "amd64",
                            "operatingSystem": "linux"}},
}
CPU_NODE = {"metadata": {"name": "cpu-node-1"}, "status": {"capacity": {"cpu": "16"}}}


@pytest.fixture
def cluster(kmock: Any) -> KubernetesCluster:
    kmock.objects[kmock.resource("", "v1", "nodes"), None, "gpu-node-1"] = GPU_NODE
    kmock.objects[kmock.resource("", "v1", "nodes"), None, "cpu-node-1"] = CPU_NODE
    kmock.objects[kmock.resource("apps", "v1", "deployments"), "gpu-operator", "dcgm"] = {
        "metadata": {"name": "dcgm", "namespace": "gpu-operator"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "dcgm", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.8"}]}}},
        "status": {"readyReplicas": 1}}
    # The official client asks for /version/; kmock answers only /version (as a real API
    # server answers both). The same document, at the client's path:
    kmock["get /version/"] << {"major": "1", "minor": "31", "gitVersion": "v1.31.2-eks-7f9249a",
                               "goVersion": "go1.22.8", "platform": "linux/amd64"}
    return KubernetesCluster(api_url=str(kmock.url).rstrip("/"))


async def test_the_collector_reads_the_clusters_nodes(cluster: KubernetesCluster) -> None:
    got = await asyncio.to_thread(k8s.collect, cluster=cluster)
    # kmock 0.8 cannot serve GET /api/v1/namespaces (its path parser reads `namespaces` as
    # the namespace prefix and fails): one list the API refuses is an error beside the rest.
    assert [e.message.split(":")[0] for e in got.errors] == ["namespaces"]
    assert set(got.nodes) == {"gpu-node-1", "cpu-node-1"}
    gpu = got.nodes["gpu-node-1"]
    assert gpu["K8s.node.gpu-capacity"] == 8 and gpu["K8s.node.gpu-allocatable"] == 8
    assert gpu["K8s.node.kubelet-version"] == "v1.31.2"
    assert gpu["K8s.node.container-runtime-name"] == "containerd"
    assert gpu["K8s.label.nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert gpu["K8s.taint.nvidia.com/gpu"] == "present:NoSchedule"
    assert got.nodes["cpu-node-1"]["K8s.node.gpu-capacity"] == 0
    assert got.cluster["K8s.server.version"] == "1.31.2"  # no v, no vendor suffix
    assert got.cluster["K8s.image.nvcr.io/nvidia/k8s/dcgm-exporter"] == "3.3.8"


async def test_an_unreachable_cluster_is_an_error_in_the_snapshot_not_a_crash() -> None:
    got = await asyncio.to_thread(
        k8s.collect, cluster=KubernetesCluster(api_url="http://127.0.0.1:9"))
    assert not got.nodes and got.errors and got.errors[0].collector == "kubernetes"


async def test_a_kubernetes_sites_snapshotter_collects_its_cluster(
        cluster: KubernetesCluster, tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(f"""\
site: site-k
federation: nats://127.0.0.1:4222
backend: kubernetes
inventory: {{gpus: 0, cpus: 2, memory: 4Gi}}
workdir: ./work
kubernetes: {{api_url: "{cluster.api_url}"}}
""")
    service = SnapshotterService(SimpleNamespace(
        site="site-k", site_config=str(site), options={"snapshot_collect": "local"}))
    snap = await asyncio.to_thread(service._collect)
    nodes = {n.node: flatten(n) for n in snap.nodes}
    assert nodes["gpu-node-1"]["K8s.node.gpu-capacity"] == 8
    assert "cpu-node-1" in nodes
    assert flatten(snap.cluster)["K8s.server.version"] == "1.31.2"
