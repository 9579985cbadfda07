"""Parser for `nvidia-smi topo -m`: the GPU/NIC link matrix and each GPU's CPU/NUMA affinity.

GPU.topology.GPU<a>-GPU<b>   link between two GPUs (a < b): NV18, NODE, SYS, PIX, ...
GPU.topology.GPU<a>-NIC<n>   link between a GPU and a NIC
GPU.topology.NIC<n>          the NIC's device name (mlx5_0), from the NIC legend
GPU.topology.nic-count       number of NICs in the matrix
GPU.gpu<a>.{cpu-affinity, numa-affinity, numa-id}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cairn.snapshot.model import Reading

_GPU = re.compile(r"^GPU\d+$")
# Trailing columns that are not devices; older drivers print only the first two.
_EXTRAS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")


@dataclass
class Topology:
    """The matrix as printed: device names in column order, links, affinities."""

    devices: list[str] = field(default_factory=list)
    links: dict[tuple[str, str], str] = field(default_factory=dict)
    affinity: dict[str, dict[str, str]] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if _GPU.match(d)]

    @property
    def nics(self) -> list[str]:
        # Newer drivers print NIC<n> plus a legend; older ones name the NIC (mlx5_0) directly.
        return [d for d in self.devices if not _GPU.match(d)]


def parse_topo(text: str) -> Topology:
    """Parse `nvidia-smi topo -m` (tab-separated; the legend follows a blank line)."""
    lines = text.splitlines()
    topo = Topology()
    header_at = next((i for i, ln in enumerate(lines) if "GPU0" in ln and "\t" in ln), None)
    if header_at is None:
        raise ValueError("no GPU matrix header in nvidia-smi topo -m output")
    header = [cell.strip() for cell in lines[header_at].split("\t")]
    columns = [c for c in header if c and c not in _EXTRAS]
    extras = [c for c in header if c in _EXTRAS]
    topo.devices = columns
    for line in lines[header_at + 1 :]:
        if not line.strip():
            break
        cells = [cell.strip() for cell in line.split("\t")]
        name = cells[0]
        if name not in columns:
            continue
        for column, value in zip(columns, cells[1 : 1 + len(columns)], strict=False):
            if column != name and value and value != "X":
                topo.links[(name, column)] = value
        # Drivers differ in how many empty cells pad the affinity columns, so the non-empty
        # trailing cells are matched to the trailing headers in order.
        trailing = [c for c in cells[1 + len(columns) :] if c]
        if trailing:
            topo.affinity[name] = dict(zip(extras, trailing, strict=False))
    for line in lines:
        legend = _NIC_LEGEND.match(line)
        if legend:
            topo.nic_names[legend.group(1)] = legend.group(2)
    return topo


def topo_readings(topo: Topology) -> dict[str, Reading]:
    out: dict[str, Reading] = {"GPU.topology.nic-count": len(topo.nics)}
    gpus = topo.gpus
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            if (a, b) in topo.links:
                out[f"GPU.topology.{a}-{b}"] = topo.links[(a, b)]
        for nic in topo.nics:
            if (a, nic) in topo.links:
                out[f"GPU.topology.{a}-{nic}"] = topo.links[(a, nic)]
        index = a[3:]
        keys = {
            "CPU Affinity": "cpu-affinity",
            "NUMA Affinity": "numa-affinity",
            "GPU NUMA ID": "numa-id",
        }
        for header, key in keys.items():
            value = topo.affinity.get(a, {}).get(header)
            if value and value != "N/A":
                out[f"GPU.gpu{index}.{key}"] = value
    for nic, name in topo.nic_names.items():
        out[f"GPU.topology.{nic}"] = name
    return out
