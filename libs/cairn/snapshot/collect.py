"""Taking a snapshot of this machine: every node collector at once, in threads, with a bound.

Collectors are I/O bound (files, subprocesses, a socket), so threads overlap their waits;
one slow tool then costs its own time, not the sum of all.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime
from pathlib import Path

from cairn.snapshot.collectors import (
    ClusterCollected,
    Collected,
    container,
    gpu,
    hardware,
    os_info,
    slurm,
)
from cairn.snapshot.model import CollectorError, Reading, Snapshot, make_snapshot

DEADLINE = 15.0
"""Seconds a whole snapshot may take. Here it takes well under 2 s; the bound is for a real
8-GPU node where `nvidia-smi -q -x` alone may take seconds (each tool also has its own
timeout, so an abandoned thread ends soon after)."""

MAX_THREADS = 8

# Where slurm.conf lives on Debian/RHEL installs, and where configless slurmd caches it.
SLURM_CONF_PATHS = (
    "/etc/slurm/slurm.conf",
    "/etc/slurm-llnl/slurm.conf",
    "/run/slurm/conf/slurm.conf",
    "/var/spool/slurmd/conf-cache/slurm.conf",
)

NodeCollector = Callable[[], Collected]
ClusterCollector = Callable[[], ClusterCollected]


def node_collectors() -> dict[str, NodeCollector]:
    """The collectors that describe this machine, by name."""
    return {
        "os": os_info.collect,
        "cpu": hardware.collect_cpu,
        "memory": hardware.collect_memory,
        "numa": hardware.collect_numa,
        "gpu": gpu.collect,
        "docker": container.collect,
    }


def cluster_collectors() -> dict[str, ClusterCollector]:
    """Cluster collectors that apply here: Slurm when its client tools are installed.

    Kubernetes needs a configured client, so it is not guessed at; a site's snapshotter
    passes one explicitly.
    """
    found: dict[str, ClusterCollector] = {}
    if shutil.which("scontrol") and shutil.which("sinfo") and _slurm_configured():
        found["slurm"] = slurm.collect
    return found


def _slurm_configured() -> bool:
    # Client tools without a configuration (a login image, a package pulled in as a
    # dependency) mean "not a Slurm node", not "Slurm is broken".
    if os.environ.get("SLURM_CONF"):
        return True
    return any(Path(p).exists() for p in SLURM_CONF_PATHS)


def _run_all(
    node: Mapping[str, NodeCollector], cluster: Mapping[str, ClusterCollector], deadline: float
) -> tuple[list[tuple[str, Collected | None]], list[tuple[str, ClusterCollected | None]]]:
    pool = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="cairn-collect")
    node_futures = {name: pool.submit(func) for name, func in node.items()}
    cluster_futures = {name: pool.submit(func) for name, func in cluster.items()}
    every: list[Future[object]] = [*node_futures.values(), *cluster_futures.values()]  # type: ignore[list-item]
    wait(every, timeout=deadline)
    # Threads still running are left to their own tool timeouts; we do not wait for them.
    pool.shutdown(wait=False, cancel_futures=True)
    return (
        [(n, f.result() if f.done() else None) for n, f in node_futures.items()],
        [(n, f.result() if f.done() else None) for n, f in cluster_futures.items()],
    )


def collect_local(
    site: str | None = None,
    *,
    deadline: float = DEADLINE,
    node_name: str | None = None,
    collectors: Mapping[str, NodeCollector] | None = None,
    cluster: Mapping[str, ClusterCollector] | None = None,
) -> Snapshot:
    """Snapshot this machine: OS, CPU, memory, NUMA, GPUs, Docker, and Slurm if present.

    Never raises for a broken source: each failure is a CollectorError in the snapshot.

    Args:
        site: the site name recorded in the snapshot (checked against the name rule).
        deadline: seconds to wait for all collectors; late ones are recorded as timed out.
        node_name: the node's name (default: this host's name).
        collectors, cluster: replace the default collectors (tests, a site's snapshotter).
    """
    taken_at = datetime.now(UTC)
    name = node_name or socket.gethostname()
    node_results, cluster_results = _run_all(
        node_collectors() if collectors is None else collectors,
        cluster_collectors() if cluster is None else cluster,
        deadline,
    )
    readings: dict[str, Reading] = {}
    node_errors: list[CollectorError] = []
    late = f"did not finish within {deadline:g}s"
    for collector, result in node_results:
        if result is None:
            node_errors.append(CollectorError(collector=collector, message=late))
            continue
        readings.update(result.readings)
        node_errors.extend(result.errors)
    nodes: dict[str, dict[str, Reading]] = {name: readings}
    cluster_readings: dict[str, Reading] = {}
    cluster_errors: list[CollectorError] = []
    for collector, cresult in cluster_results:
        if cresult is None:
            cluster_errors.append(CollectorError(collector=collector, message=late))
            continue
        cluster_readings.update(cresult.cluster)
        for other, values in cresult.nodes.items():
            nodes.setdefault(other, {}).update(values)
        cluster_errors.extend(cresult.errors)
    return make_snapshot(
        site=site,
        taken_at=taken_at,
        cluster=cluster_readings,
        nodes=nodes,
        node_errors={name: node_errors},
        errors=cluster_errors,
    )
