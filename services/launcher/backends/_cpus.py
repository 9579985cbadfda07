"""Which CPUs a worker is pinned to: shared by the backends that pin on this host."""

from __future__ import annotations

import math
import os
from collections import Counter

from cairn.errors import InvalidInput
from cairn.launcher.backends.base import LaunchSpec


def pick_cpus(spec: LaunchSpec, load: Counter[int]) -> list[int]:
    """The CPUs to pin to: the caller's choice, else the least-used allowed ones.

    Raises:
        InvalidInput: the caller named CPUs this launcher may not use.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if spec.cpus is not None:
        stray = sorted(set(spec.cpus) - set(allowed))
        if stray:
            raise InvalidInput(
                f"CPUs {stray} are not available to this launcher (it may use {allowed})",
                field="cpus",
            )
        return sorted(set(spec.cpus))
    if spec.millicpus <= 0:
        return []
    count = min(len(allowed), math.ceil(spec.millicpus / 1000))
    return sorted(sorted(allowed, key=lambda cpu: (load[cpu], cpu))[:count])
