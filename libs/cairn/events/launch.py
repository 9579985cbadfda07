"""Agent -> launcher commands of one site, on `cairn.site.<site>.launch.<verb>` (SITE_<site>).

A launch request carries secret *references* only; the launcher resolves them at launch.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from cairn.events.base import Event
from cairn.events.job import Resources


class DatasetMount(msgspec.Struct, frozen=True, kw_only=True):
    source: str
    mode: Literal["ro", "rw"] = "ro"


class LaunchRequested(Event, tag="launch.requested", frozen=True, kw_only=True):
    """Run one worker.

    `launch_id` is `<job>/<site>/<role>/<rank>/<attempt>`, the idempotency key.
    """

    launch_id: str
    job: str
    site: str
    role: str
    rank: int = 0
    attempt: int = 0
    entrypoint: str
    resources: Resources = Resources()
    gpus: list[str] = []
    image: str | None = None
    code_digest: str | None = None
    params: dict[str, Any] = {}
    env: dict[str, str] = {}
    secret_refs: dict[str, str] = {}
    datasets: dict[str, DatasetMount] = {}
    timeout_s: float = 3600.0
    platform: dict[str, Any] = {}
    nodes: int = 1
    """Nodes the worker spans (`resources` per node): a multi-node batch job."""


class LaunchCancel(Event, tag="launch.cancel", frozen=True, kw_only=True):
    launch_id: str
    job: str
    site: str
    reason: str = "cancelled"
    grace_s: float = 10.0


LaunchCommand = LaunchRequested | LaunchCancel
