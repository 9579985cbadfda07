"""Launcher backends: one `Backend` protocol, implementations loaded by name.

    load_backend("process", workdir="/var/lib/cairn/site-a")

Implementations are imported lazily (see `base.BACKENDS`), so importing this package pulls in
no container or cluster client.
"""

from cairn.launcher.backends.base import (
    Backend,
    Capability,
    DatasetMount,
    ExitCause,
    LaunchHandle,
    LaunchSpec,
    WorkerExit,
    load_backend,
    make_launch_id,
)
from cairn.launcher.backends.errors import LaunchFailed

__all__ = [
    "Backend",
    "Capability",
    "DatasetMount",
    "ExitCause",
    "LaunchFailed",
    "LaunchHandle",
    "LaunchSpec",
    "WorkerExit",
    "load_backend",
    "make_launch_id",
]
