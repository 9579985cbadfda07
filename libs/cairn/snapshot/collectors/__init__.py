"""Collectors: each asks one source (a file, a tool, an API) and returns typed readings.

Every collector is wrapped by `guarded`, so it never raises: a failure becomes a
`CollectorError` with the reason, and a missing tool raises `ToolAbsent` inside the
collector, which is recorded with `absent=True` ("nvidia-smi not found") so that "not
installed" stays distinct from "asked, and there were zero GPUs".
"""

from cairn.snapshot.collectors.collected import (
    ClusterCollected,
    Collected,
    ToolAbsent,
    guarded,
    guarded_cluster,
)
from cairn.snapshot.collectors.command import DEFAULT_TIMEOUT, run_command

__all__ = [
    "DEFAULT_TIMEOUT",
    "ClusterCollected",
    "Collected",
    "ToolAbsent",
    "guarded",
    "guarded_cluster",
    "run_command",
]
