"""k8s-device-plugin: a device plugin (or DRA driver) advertises GPUs on the cluster's nodes.

Reads `kubectl get nodes -o json` and sums allocatable `nvidia.com/gpu`. Skipped with the
reason when this worker has no Kubernetes to ask (no kubectl, or no in-cluster service
account and no kubeconfig).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cairn.checks.report import CheckReport
from cairn.snapshot.collectors.collected import ToolAbsent
from cairn.snapshot.collectors.command import CommandFailed, run_command

NAME = "k8s-device-plugin"
RESOURCE = "nvidia.com/gpu"


def _has_cluster() -> bool:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    config = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    return any(Path(p).is_file() for p in config.split(os.pathsep) if p)


def allocatable(nodes: dict[str, Any]) -> dict[str, int]:
    """Node name -> allocatable GPUs (0 where the plugin advertises none)."""
    out: dict[str, int] = {}
    for item in nodes.get("items", []):
        name = str(item.get("metadata", {}).get("name", "?"))
        value = item.get("status", {}).get("allocatable", {}).get(RESOURCE, "0")
        out[name] = int(value) if str(value).isdigit() else 0
    return out


def run(params: Mapping[str, Any]) -> CheckReport:
    if not _has_cluster():
        return CheckReport(check=NAME, status="skipped",
                           message="no Kubernetes here (no service account, no kubeconfig)")
    try:
        nodes = json.loads(run_command(["kubectl", "get", "nodes", "-o", "json"], timeout=30))
    except ToolAbsent:
        return CheckReport(check=NAME, status="skipped", message="kubectl is not installed here")
    except (CommandFailed, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        return CheckReport(check=NAME, status="failed", message=f"kubectl get nodes: {exc}")
    per_node = allocatable(nodes)
    total = sum(per_node.values())
    readings: dict[str, int | float | str | bool] = {"k8s-gpu-allocatable": total}
    if total == 0:
        return CheckReport(check=NAME, status="failed", readings=readings,
                           details={"nodes": per_node},
                           message=f"no node advertises {RESOURCE}: is the device plugin "
                                   "(GPU Operator) running?")
    return CheckReport(check=NAME, status="passed", readings=readings, details={"nodes": per_node},
                       message=f"{total} GPUs allocatable on "
                               f"{sum(1 for v in per_node.values() if v)} nodes")
