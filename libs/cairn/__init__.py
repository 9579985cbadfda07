"""Cairn: federated jobs across independent sites, verified sites, one event log.

The top-level names, imported on first use (so `import cairn` stays cheap):

    from cairn import Client          # the public Python API (cairn.client)
    from cairn import Worker, main    # what job code imports (cairn.worker)
    from cairn import CairnError      # the root of every error Cairn raises on purpose

Packages: `cairn.client` (API for programs), `cairn.worker` (job code), `cairn.runtime`
(what runs services), and the core every side shares: `cairn.events`, `cairn.api`,
`cairn.subjects`, `cairn.bus`, `cairn.state`, `cairn.spec`, `cairn.recipes`, `cairn.snapshot`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Client": "cairn.client",
    "Worker": "cairn.worker",
    "SyncWorker": "cairn.worker",
    "main": "cairn.worker",
    "CairnError": "cairn.errors",
    "InvalidInput": "cairn.errors",
    "NotFound": "cairn.errors",
    "PermissionDenied": "cairn.errors",
    "Conflict": "cairn.errors",
    "Unavailable": "cairn.errors",
    "Timeout": "cairn.errors",
}

__all__ = [
    "CairnError", "Client", "Conflict", "InvalidInput", "NotFound", "PermissionDenied",
    "SyncWorker", "Timeout", "Unavailable", "Worker", "__version__", "main",
]

if TYPE_CHECKING:
    from cairn.client import Client
    from cairn.errors import (
        CairnError,
        Conflict,
        InvalidInput,
        NotFound,
        PermissionDenied,
        Timeout,
        Unavailable,
    )
    from cairn.worker import SyncWorker, Worker, main


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cairn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
