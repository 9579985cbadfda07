"""A launch's steps around the backend's submit, made to survive a bus that does not answer
for a while (a cluster electing leaders after a server died).

A launch request is folded into the launcher's state before its record is written, so a
redelivery of the same request is never a second launch. The other side of that: a step
that fails after the fold must not leave the job waiting. A worker that started is always
recorded, reported running and watched, in the background if need be; a launch that could
not be recorded before its submit is reported as not started (`infrastructure`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cairn.errors import CairnError
from cairn.events import WorkerLaunching, WorkerRunning
from cairn.events.base import now
from cairn.launcher.backends.base import LaunchHandle, WorkerExit

if TYPE_CHECKING:
    from cairn.launcher.service import LauncherService

log = logging.getLogger("cairn.launcher")
ATTEMPTS = 20
"""How often a started worker's record is tried again; each try waits up to 30 s."""


async def running(svc: LauncherService, launching: WorkerLaunching, running: WorkerRunning,
                  handle: LaunchHandle) -> None:
    """Record a started worker's handle, say it runs, and watch it to its end.

    Raises:
        CairnError: the record or the report failed (each may be tried again).
    """
    if getattr(svc.backend, "started", None) is not None:
        # A backend whose worker may wait to start (a pod pending for a node): the handle
        # is kept now, `worker.running` sent once the worker really runs.
        launch = await svc.record(launching, handle=handle)
        svc.watch(launch, handle, running=running)
        return
    launch = await svc.record(running, handle=handle)
    await svc.bus.publish(running)
    svc.watch(launch, handle)


async def running_later(svc: LauncherService, launching: WorkerLaunching,
                        running_: WorkerRunning, handle: LaunchHandle) -> None:
    """`running`, tried again until it goes through; the worker is watched in any case."""
    for attempt in range(ATTEMPTS):
        try:
            return await running(svc, launching, running_, handle)
        except CairnError as exc:
            log.warning("recording worker %s failed (attempt %d): %s",
                        running_.launch_id, attempt + 2, exc)
    launch = svc.launches.get(running_.launch_id)
    assert launch is not None
    log.error("could not record worker %s; watching it anyway", running_.launch_id)
    svc.watch(launch, handle)


async def not_started(svc: LauncherService, launch_id: str, why: str) -> None:
    """Report a launch that failed before its submit as a worker that never started."""
    log.warning("launch %s not started: %s", launch_id, why)
    launch = svc.launches.get(launch_id)
    assert launch is not None
    await svc.ends.report_or_later(launch, WorkerExit(
        launch_id=launch_id, exit_code=None, cause="infrastructure",
        message=f"the launcher could not start this worker: {why}", ended_at=now()))
