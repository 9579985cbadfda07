"""Normalized resource amounts: what a role asks for, what a site has, what a study may use."""

from __future__ import annotations

import msgspec

from cairn.spec.quantity import format_cpus, format_memory


class ResourceRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Resources in integers, so the agent's arithmetic is exact.

    Attributes:
        gpus: Whole GPUs.
        millicpus: CPUs in thousandths (`1.5` CPUs is 1500).
        memory_bytes: Memory in bytes.
    """

    gpus: int = 0
    millicpus: int = 0
    memory_bytes: int = 0

    def __add__(self, other: ResourceRequest) -> ResourceRequest:
        return ResourceRequest(
            gpus=self.gpus + other.gpus,
            millicpus=self.millicpus + other.millicpus,
            memory_bytes=self.memory_bytes + other.memory_bytes,
        )

    def __sub__(self, other: ResourceRequest) -> ResourceRequest:
        return ResourceRequest(
            gpus=self.gpus - other.gpus,
            millicpus=self.millicpus - other.millicpus,
            memory_bytes=self.memory_bytes - other.memory_bytes,
        )

    def fits_in(self, available: ResourceRequest) -> bool:
        """True when every amount is at most what `available` holds."""
        return (
            self.gpus <= available.gpus
            and self.millicpus <= available.millicpus
            and self.memory_bytes <= available.memory_bytes
        )

    def describe(self) -> str:
        """For people: `2 gpus, 1.5 cpus, 4Gi memory`."""
        return (
            f"{self.gpus} gpus, {format_cpus(self.millicpus)} cpus, "
            f"{format_memory(self.memory_bytes)} memory"
        )


ZERO = ResourceRequest()
