"""The readings collectors produce, as name patterns: what a recipe constraint may name.

A constraint on a reading no collector produces can never pass; `cairn recipe lint` reports
it (naming recipe, line and reading). Patterns are `fnmatch` globs over `Type.Subtype.Key`;
a `*` stands for a part the collector takes from the machine (a sysctl path, a GPU index).
Keep this list beside the collectors: a new reading is a new line here.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

COLLECTED: dict[str, tuple[str, ...]] = {
    "hardware": (
        "CPU.info.arch", "CPU.info.cores", "CPU.info.model", "CPU.info.sockets",
        "CPU.info.threads", "CPU.info.vendor", "Memory.info.*", "NUMA.info.node-count",
        "NUMA.*.cpus", "NUMA.*.memory-total-bytes",
    ),
    "gpu": (
        "GPU.hardware.detection-source", "GPU.hardware.driver-loaded", "GPU.hardware.gpu-count",
        "GPU.hardware.gpu-present", "GPU.hardware.model", "GPU.smi.*", "GPU.gpu[0-9]*.*",
        "GPU.topology.*",
    ),
    "container": ("Container.docker.*",),
    "os": ("OS.grub.*", "OS.kmod.*", "OS.release.*", "OS.sysctl.*"),
    "k8s": (
        "K8s.server.*", "K8s.node.*", "K8s.label.*", "K8s.taint.*", "K8s.deployment.*",
        "K8s.image.*", "K8s.namespace.*", "Deployment.*.version",
    ),
    "slurm": (
        "Slurm.cluster.gpu-count", "Slurm.cluster.name", "Slurm.cluster.node-count",
        "Slurm.cluster.partition-count", "Slurm.cluster.version", "Slurm.config.*",
        "Slurm.node.*", "Slurm.partition.*",
    ),
}
"""Collector -> the reading names it can produce."""


def collector_of(reading: str) -> str | None:
    """The collector that produces `reading`, or None when none does."""
    for collector, patterns in COLLECTED.items():
        if any(fnmatchcase(reading, pattern) for pattern in patterns):
            return collector
    return None
