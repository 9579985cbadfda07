"""Kubernetes collector: the server version and every Node object (AICR names where AICR has
them, Cairn names for GPU resources, labels and taints).

    cluster: K8s.server.{version, gitVersion, goVersion, platform}
             K8s.namespace.<name> = true, K8s.deployment.<ns>/<name> = "ready/desired",
             K8s.image.<repository> = tag (deployments' container images, AICR K8s.image.*),
             Deployment.<name>.version = its first container's image tag
    node:    K8s.node.{source-node, provider, provider-id, container-runtime-id,
                       container-runtime-name, container-runtime-version, kubelet-version,
                       kernel-version, operating-system, os-image, architecture,
                       gpu-allocatable, gpu-capacity, taint-count}
             K8s.label.<key> (nvidia.com/* and feature.node.kubernetes.io/* labels)
             K8s.taint.<key> = "<value>:<effect>" (or ":<effect>" without a value)

Takes a site.yaml's `kubernetes:` section (a site's snapshotter passes it), a `kubernetes`
ApiClient, or already-fetched JSON dicts, so it runs on recorded objects in tests.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from typing import Any

from cairn.snapshot.collectors.collected import ClusterCollected, guarded_cluster
from cairn.snapshot.model import CollectorError, Reading

GPU_RESOURCE = "nvidia.com/gpu"
LABEL_PREFIXES = ("nvidia.com/", "feature.node.kubernetes.io/pci-10de")
REQUEST_TIMEOUT = 10.0
RBAC_RULES: tuple[dict[str, list[str]], ...] = (
    {"apiGroups": [""], "resources": ["nodes", "namespaces"], "verbs": ["list"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]},
)
"""The snapshotter's rights, cluster-wide (a ClusterRole): exactly what `_fetch` lists.
`/version` is readable by every authenticated client (system:public-info-viewer)."""

_SEMVER = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?)")


def _quantity(value: object) -> int:
    # GPU counts are whole numbers; anything else (absent, "") counts as none.
    try:
        return int(str(value))
    except ValueError:
        return 0


def server_readings(version: dict[str, Any]) -> dict[str, Reading]:
    """K8s.server.* from the /version document. `version` drops the "v" and any vendor
    suffix (v1.30.4-eks-a737599 -> 1.30.4) so constraints like ">= 1.30" compare cleanly."""
    git = str(version.get("gitVersion", ""))
    out: dict[str, Reading] = {}
    if match := _SEMVER.match(git):
        out["K8s.server.version"] = match.group(1)
    elif version.get("major"):
        minor = str(version.get("minor", "")).rstrip("+")  # GKE/EKS print "30+"
        out["K8s.server.version"] = f"{version['major']}.{minor}"
    for src in ("gitVersion", "goVersion", "platform"):
        if version.get(src):
            out[f"K8s.server.{src}"] = str(version[src])
    return out


def node_readings(node: dict[str, Any]) -> dict[str, Reading]:
    """Readings of one Node object (as the API returns it, camelCase JSON)."""
    meta = node.get("metadata", {})
    spec = node.get("spec", {})
    status = node.get("status", {})
    info = status.get("nodeInfo", {})
    out: dict[str, Reading] = {"K8s.node.source-node": str(meta.get("name", ""))}
    provider_id = str(spec.get("providerID", ""))
    if provider_id:
        out["K8s.node.provider-id"] = provider_id
        out["K8s.node.provider"] = provider_id.split("://", 1)[0]
    runtime = str(info.get("containerRuntimeVersion", ""))
    if runtime:
        name, _, ver = runtime.partition("://")
        out["K8s.node.container-runtime-id"] = runtime
        out["K8s.node.container-runtime-name"] = name
        out["K8s.node.container-runtime-version"] = ver
    fields = {
        "kubeletVersion": "kubelet-version",
        "kernelVersion": "kernel-version",
        "operatingSystem": "operating-system",
        "osImage": "os-image",
        "architecture": "architecture",
    }
    for src, key in fields.items():
        if info.get(src):
            out[f"K8s.node.{key}"] = str(info[src])
    # Zero is written out: a CPU node must say "0 GPUs", not leave the reader guessing.
    out["K8s.node.gpu-allocatable"] = _quantity(status.get("allocatable", {}).get(GPU_RESOURCE))
    out["K8s.node.gpu-capacity"] = _quantity(status.get("capacity", {}).get(GPU_RESOURCE))
    for key, value in sorted((meta.get("labels") or {}).items()):
        if key.startswith(LABEL_PREFIXES):
            out[f"K8s.label.{key}"] = str(value)
    taints = spec.get("taints") or []
    out["K8s.node.taint-count"] = len(taints)
    for taint in taints:
        out[f"K8s.taint.{taint['key']}"] = f"{taint.get('value', '')}:{taint.get('effect', '')}"
    return out


def _image_readings(deployments: Iterable[dict[str, Any]]) -> dict[str, Reading]:
    out: dict[str, Reading] = {}
    for dep in deployments:
        meta, spec, status = dep.get("metadata", {}), dep.get("spec", {}), dep.get("status", {})
        ready, desired = status.get("readyReplicas") or 0, spec.get("replicas", 1)
        out[f"K8s.deployment.{meta.get('namespace')}/{meta.get('name')}"] = f"{ready}/{desired}"
        containers = spec.get("template", {}).get("spec", {}).get("containers", [])
        for index, container in enumerate(containers):
            image = str(container.get("image", "")).split("@", 1)[0]
            repo, sep, tag = image.rpartition(":")
            if sep and "/" not in tag:  # a colon in the registry port is not a tag
                out[f"K8s.image.{repo}"] = tag
                if index == 0 and meta.get("name"):
                    # AICR's Deployment.<name>.version: what a deployed component runs, e.g.
                    # the GPU Operator's v24.9.0 (its main container's image tag).
                    out[f"Deployment.{meta['name']}.version"] = tag
            elif image:
                out[f"K8s.image.{image}"] = "latest"
    return out


def cluster_readings(
    *,
    version: dict[str, Any] | None,
    nodes: Iterable[dict[str, Any]],
    namespaces: Iterable[str] = (),
    deployments: Iterable[dict[str, Any]] = (),
) -> ClusterCollected:
    result = ClusterCollected()
    if version is not None:
        result.cluster.update(server_readings(version))
    for ns in namespaces:
        result.cluster[f"K8s.namespace.{ns}"] = True
    result.cluster.update(_image_readings(deployments))
    for node in nodes:
        result.nodes[str(node["metadata"]["name"])] = node_readings(node)
    return result


def _fetch(api_client: Any) -> tuple[dict[str, Any], list[CollectorError]]:
    """Fetch the same documents through the official client, as plain JSON (not the
    client's models, which reject a document with any field filled unexpectedly). Each list
    stands alone: one the API refuses (RBAC, an old server) is an error beside the rest."""
    from cairn.errors import CairnError
    from cairn.kube import call

    # Optional dependency, imported only when a live client is given (and untyped).
    k8s: Any = importlib.import_module("kubernetes.client")
    core, apps = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client)
    calls = {"version": k8s.VersionApi(api_client).get_code, "nodes": core.list_node,
             "namespaces": core.list_namespace,
             "deployments": apps.list_deployment_for_all_namespaces}
    docs: dict[str, Any] = {"version": None, "nodes": [], "namespaces": [], "deployments": []}
    errors: list[CollectorError] = []
    for what, method in calls.items():
        try:
            answer = call(method, timeout_s=REQUEST_TIMEOUT)
        except CairnError as exc:
            errors.append(CollectorError(collector="kubernetes", message=f"{what}: {exc}"))
            continue
        docs[what] = answer if what == "version" else list(answer.get("items") or [])
    docs["namespaces"] = [ns["metadata"]["name"] for ns in docs["namespaces"]]
    return docs, errors


def _from_api(api_client: Any) -> ClusterCollected:
    docs, errors = _fetch(api_client)
    result = cluster_readings(**docs)
    result.errors.extend(errors)
    return result


@guarded_cluster("kubernetes")
def collect(
    *,
    cluster: Any = None,
    api_client: Any = None,
    version: dict[str, Any] | None = None,
    nodes: list[dict[str, Any]] | None = None,
    namespaces: list[str] | None = None,
    deployments: list[dict[str, Any]] | None = None,
) -> ClusterCollected:
    """Collect from the cluster a site.yaml's `kubernetes:` section (`cluster`, a
    `cairn.spec.site.KubernetesCluster`) names, a live `kubernetes.client.ApiClient`, or
    fetched JSON documents."""
    if cluster is not None:
        from cairn.kube import api_client as connect

        client = connect(cluster)
        try:
            return _from_api(client)
        finally:
            client.close()
    if api_client is not None:
        return _from_api(api_client)
    return cluster_readings(
        version=version,
        nodes=nodes or [],
        namespaces=namespaces or [],
        deployments=deployments or [],
    )
