"""CPU, memory and NUMA collectors (Cairn names; AICR has none for these).

CPU.info.{model, vendor, arch, sockets, cores, threads}
Memory.info.{total-bytes, available-bytes, swap-total-bytes, hugepages-total,
             hugepage-size-bytes}
NUMA.info.node-count, NUMA.node<N>.{cpus, memory-total-bytes}
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

from cairn.snapshot.collectors.collected import Collected, guarded
from cairn.snapshot.model import Reading


def parse_cpuinfo(text: str, arch: str = "") -> dict[str, Reading]:
    """CPU.info readings from /proc/cpuinfo text (x86 and Arm layouts)."""
    blocks = [b for b in text.strip().split("\n\n") if b.strip()]
    procs: list[dict[str, str]] = []
    for block in blocks:
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if "processor" in fields:
            procs.append(fields)
    out: dict[str, Reading] = {"CPU.info.threads": len(procs)}
    if arch:
        out["CPU.info.arch"] = arch
    first = procs[0] if procs else {}
    # Arm kernels print no "model name"; the closest are "Model" or "Hardware" (on the tail).
    tail = blocks[-1] if blocks else ""
    tail_fields = dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in tail.splitlines())
    )
    model = first.get("model name") or tail_fields.get("Model") or tail_fields.get("Hardware")
    if model:
        out["CPU.info.model"] = model
    vendor = first.get("vendor_id") or first.get("CPU implementer")
    if vendor:
        out["CPU.info.vendor"] = vendor
    sockets = {p.get("physical id") for p in procs if "physical id" in p}
    out["CPU.info.sockets"] = max(len(sockets), 1)
    cores_per_socket: dict[str, int] = {}
    for proc in procs:
        if "physical id" in proc and "cpu cores" in proc:
            cores_per_socket[proc["physical id"]] = int(proc["cpu cores"])
    # Without topology fields (Arm, some VMs) every logical CPU is taken as a core.
    out["CPU.info.cores"] = sum(cores_per_socket.values()) or len(procs)
    return out


_KB = re.compile(r"^(\S+):\s+(\d+)(?:\s+kB)?$")


def parse_meminfo(text: str) -> dict[str, Reading]:
    """Memory.info readings from /proc/meminfo text (kB values turned into bytes)."""
    raw: dict[str, int] = {}
    for line in text.splitlines():
        match = _KB.match(line.strip())
        if match:
            value = int(match.group(2))
            raw[match.group(1)] = value * 1024 if line.rstrip().endswith("kB") else value
    names = {
        "MemTotal": "total-bytes",
        "MemAvailable": "available-bytes",
        "SwapTotal": "swap-total-bytes",
        "HugePages_Total": "hugepages-total",
        "Hugepagesize": "hugepage-size-bytes",
    }
    return {f"Memory.info.{key}": raw[src] for src, key in names.items() if src in raw}


def numa_readings(node_dir: Path) -> dict[str, Reading]:
    """NUMA readings from a /sys/devices/system/node directory."""
    nodes = sorted(
        (p for p in node_dir.glob("node[0-9]*") if p.is_dir()), key=lambda p: int(p.name[4:])
    )
    out: dict[str, Reading] = {"NUMA.info.node-count": len(nodes)}
    for node in nodes:
        cpulist = node / "cpulist"
        if cpulist.exists():
            out[f"NUMA.{node.name}.cpus"] = cpulist.read_text().strip()
        meminfo = node / "meminfo"
        if meminfo.exists():
            match = re.search(r"MemTotal:\s+(\d+)\s+kB", meminfo.read_text())
            if match:
                out[f"NUMA.{node.name}.memory-total-bytes"] = int(match.group(1)) * 1024
    return out


@guarded("cpu")
def collect_cpu(root: str = "/") -> Collected:
    text = (Path(root) / "proc/cpuinfo").read_text(errors="replace")
    return Collected(readings=parse_cpuinfo(text, platform.machine()))


@guarded("memory")
def collect_memory(root: str = "/") -> Collected:
    return Collected(readings=parse_meminfo((Path(root) / "proc/meminfo").read_text()))


@guarded("numa")
def collect_numa(root: str = "/") -> Collected:
    node_dir = Path(root) / "sys/devices/system/node"
    if not node_dir.is_dir():  # kernels built without NUMA: one node, nothing to read
        return Collected(readings={"NUMA.info.node-count": 1})
    return Collected(readings=numa_readings(node_dir))
