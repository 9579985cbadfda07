"""Durable launch records (KV `launches_<site>`), keyed by the deterministic launch id."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from cairn.launcher.backends.base import LaunchHandle, WorkerExit


class LaunchRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the launcher knows of one worker; a restarted launcher starts from these.

    Frozen: the launcher folds its launches with `cairn.state.launch` and writes a new record
    for each step (`msgspec.structs.replace`).

    Attributes:
        state: `launching` (record written, not yet started), `running` (handle known),
            `exited` (reported).
    """

    launch_id: str
    study: str
    job: str
    site: str
    role: str
    rank: int = 0
    attempt: int = 0
    state: Literal["launching", "running", "exited"] = "launching"
    handle: LaunchHandle | None = None
    exit: WorkerExit | None = None
    requested_at: datetime | None = None
    cancelled: bool = False
    cancel_cause: str | None = None


def kv_key(launch_id: str) -> str:
    """KV keys may not contain '/': the launch id's separators become '.'."""
    return launch_id.replace("/", ".")
