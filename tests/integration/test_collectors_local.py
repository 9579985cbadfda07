"""OS, CPU, memory and NUMA collectors on this machine, and a whole local snapshot."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from cairn.snapshot import decode, encode
from cairn.snapshot.collect import collect_local
from cairn.snapshot.collectors import hardware, os_info


def test_os_collector_reads_this_machine() -> None:
    result = os_info.collect()
    assert result.errors == []
    r = result.readings
    assert r["OS.sysctl./proc/sys/kernel/osrelease"] == platform.release()
    release = Path("/etc/os-release").read_text()
    assert f"ID={r['OS.release.ID']}" in release.replace('"', "")


def test_hardware_collectors_read_this_machine() -> None:
    cpu = hardware.collect_cpu()
    memory = hardware.collect_memory()
    numa = hardware.collect_numa()
    assert cpu.errors == memory.errors == numa.errors == []
    assert cpu.readings["CPU.info.threads"] == os.cpu_count()
    assert cpu.readings["CPU.info.arch"] == platform.machine()
    total = memory.readings["Memory.info.total-bytes"]
    assert isinstance(total, int)
    assert total == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    node_count = numa.readings["NUMA.info.node-count"]
    assert isinstance(node_count, int) and node_count >= 1


def test_collect_local_is_complete() -> None:
    # How long it takes is measured by `make bench` (tools/bench_snapshot.py), not asserted.
    snap = collect_local("site-a")
    assert len(snap.nodes) == 1
    readings = snap.readings(snap.nodes[0].node)
    for prefix in ("OS.release.", "CPU.info.", "Memory.info.", "NUMA.info."):
        assert any(k.startswith(prefix) for k in readings), prefix
    # No GPU here: either readings (a driver) or an error saying what is missing, never neither.
    gpu_known = "GPU.hardware.gpu-count" in readings
    assert gpu_known or any(e.collector == "gpu" for e in snap.nodes[0].errors)
    assert decode(encode(snap)) == snap
