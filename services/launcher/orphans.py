"""Workers a launcher started but lost track of: it died between the backend's submit and
its own record of it (the launch record still says `launching`, with no handle).

At start such a launch is looked for on the platform by its ownership tag (a Slurm job's
comment, a container's or pod's label: the backend's `find`). A worker found whose Cairn job
is over (the job's stream folds to a terminal state) or whose attempt was superseded (a later
attempt of the same worker was deployed) is cancelled, and its end reported as orphaned;
one whose job still runs is adopted and reported as any reattached worker. Nothing is
cancelled on a guess: a job whose stream cannot be read counts as still running.

The same check covers reattached workers with a record: a job that ended while the whole
site was down has its worker stopped at start, not left running to its deadline.

Test hook: `CAIRN_TEST_DIE_AFTER_SUBMIT` names a file; a launcher whose backend has just
submitted a worker SIGKILLs itself, at exactly that point, when the file holds
`<site>/<study>` of that worker (it deletes the file first, so the restarted launcher does
not die again).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from cairn import subjects
from cairn.bus import replay
from cairn.errors import CairnError
from cairn.events import STUDY_DECODER, DeployCommand, JobDispatched, WorkerRunning
from cairn.launcher.backends.base import LaunchHandle, WorkerExit
from cairn.state import job as job_state
from cairn.state.launch import LaunchState

if TYPE_CHECKING:
    from cairn.launcher.service import LauncherService

log = logging.getLogger("cairn.launcher")

TEST_DIE_AFTER_SUBMIT = "CAIRN_TEST_DIE_AFTER_SUBMIT"
JOB_READ_S = 15.0
"""How long the launcher reads a job's stream at start before it gives up deciding."""
ORPHANED = "orphaned"


def die_after_submit(site: str, study: str) -> None:
    """The test hook of the module docstring: a crash right after a submit."""
    flag = os.environ.get(TEST_DIE_AFTER_SUBMIT)
    if not flag:
        return
    path = Path(flag)
    try:
        named = path.read_text(encoding="utf-8").strip()
    except OSError:
        return
    if named != f"{site}/{study}":
        return
    path.unlink(missing_ok=True)
    log.warning("%s: dying right after a submit (test hook)", TEST_DIE_AFTER_SUBMIT)
    os.kill(os.getpid(), signal.SIGKILL)


async def find(backend: object, launch_id: str) -> LaunchHandle | None:
    """The worker of `launch_id` found on the platform by its tag, or None (none there, a
    backend that cannot look, or a platform that does not answer)."""
    finder: Callable[[str], Awaitable[LaunchHandle | None]] | None = getattr(
        backend, "find", None)
    if finder is None:
        return None
    try:
        return await finder(launch_id)
    except CairnError as exc:
        log.warning("cannot look for an unrecorded worker of %s: %s", launch_id, exc)
        return None


async def why_over(svc: LauncherService, launch: LaunchState) -> str | None:
    """Why `launch`'s worker has no more work, read from the study's stream (`verdict`);
    None while it may still be needed or cannot be told."""
    study = launch.study
    filters = [subjects.job_all(study, launch.job),
               subjects.site_cmd(study, svc.site, "deploy")]
    events: list[object] = []
    try:
        async with asyncio.timeout(JOB_READ_S):
            async for item in replay(svc.bus, subjects.study_stream(study).name,
                                     STUDY_DECODER, filters=filters):
                if item.event is not None:
                    events.append(item.event)
    except (CairnError, TimeoutError) as exc:
        log.warning("cannot tell whether job %s is over (%s): its worker %s is kept",
                    launch.job, exc or "timed out", launch.launch_id)
        return None
    return verdict(events, launch)


def verdict(events: list[object], launch: LaunchState) -> str | None:
    """From the job's events (and this site's deploy commands), in stream order: `job over:
    <state>` once the job folds to a terminal state, `superseded by attempt <n>` once a later
    attempt of the same worker was deployed or spoken of; else None."""
    job: job_state.JobState | None = None
    later = -1
    for event in events:
        job = job_state.apply(job, event)
        later = max(later, _attempt_of(event, launch))
    if job is not None and job.terminal:
        return f"job over: {job.state}"
    if later > launch.attempt:
        return f"superseded by attempt {later}"
    return None


def _attempt_of(event: object, launch: LaunchState) -> int:
    """The attempt of `launch`'s worker (same site, role, rank) that `event` deploys or
    speaks of; -1 when it is about no attempt of it."""
    mine = (launch.site, launch.role, launch.rank)
    if isinstance(event, JobDispatched):
        return max((d.attempt for d in event.deployments
                    if (d.site, d.role, d.rank) == mine), default=-1)
    if isinstance(event, DeployCommand) and event.job != launch.job:
        return -1
    attempt = getattr(event, "attempt", None)
    if isinstance(attempt, int) and (getattr(event, "site", None), getattr(event, "role", None),
                                     getattr(event, "rank", None)) == mine:
        return attempt
    return -1


async def adopt_or_stop(svc: LauncherService, launch: LaunchState,
                        found: LaunchHandle, *, recorded: bool) -> None:
    """A worker found running at start: cancelled and reported orphaned when its job is
    over, else watched (`recorded`: its record already holds the handle and its
    `worker.running` went out, when the backend starts workers at once)."""
    assert svc.backend is not None and svc.rt is not None
    why = await why_over(svc, launch)
    if not recorded:
        await svc.remember(launch.launch_id, found)
    if why is not None:
        log.warning("worker %s is orphaned (%s): cancelling it", launch.launch_id, why)
        svc.rt.spawn(_stop(svc, launch, found, why), f"orphan:{launch.launch_id}")
        return
    running = None
    if launch.state == "launching":
        running = WorkerRunning(**svc.event_base(launch, "running"), native_id=found.native_id)
        if getattr(svc.backend, "started", None) is None:
            # Started at once (a batch job, a container): say so now, as a launch would.
            launch = await svc.record(running, handle=found)
            await svc.bus.publish(running)
            running = None
    if not recorded:
        log.info("adopted worker %s, which the launcher had not recorded", launch.launch_id)
    svc.watch(launch, found, running=running)


async def _stop(svc: LauncherService, launch: LaunchState, found: LaunchHandle,
                why: str) -> None:
    assert svc.backend is not None
    # No grace of the launcher's own: the platform's cancel gives the worker its kill wait,
    # and whatever it would still do is of no use to a job that is over.
    await svc.backend.cancel(found, 0.0)
    ended = await svc.backend.wait(found)
    await svc.ends.report_or_later(launch, msgspec.structs.replace(
        ended, message=f"{ORPHANED}: {why}; {ended.message}"))


def unrecorded_exit(found: WorkerExit) -> WorkerExit:
    """How an unrecorded worker that had already ended is reported: its real end, said to
    be that of a worker the launcher had lost track of."""
    return msgspec.structs.replace(
        found, message=f"the launcher stopped before recording this worker; {found.message}")
