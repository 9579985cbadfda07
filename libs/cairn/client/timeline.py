"""A study's history for people: one line per event, a short human summary per type.

`cairn replay`, `cairn events tail` and `cairn demo` print the same lines, so a reader learns
one format. The summary is built from the event alone (no state), so it is stable under replay.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from cairn.bus import Replayed
from cairn.events import (
    CancelCommand,
    DeadLettered,
    DeployCommand,
    DeploymentAccepted,
    DeploymentRejected,
    JobAborted,
    JobCancelRequested,
    JobCompleted,
    JobDispatched,
    JobEnding,
    JobFailed,
    JobQueued,
    JobRunning,
    JobSubmitted,
    JobUnschedulable,
    StudyAdminAdded,
    StudyAdminRemoved,
    StudyCreated,
    StudyHold,
    StudySiteAdded,
    StudySiteRemoved,
    StudyTerm,
    WorkerExited,
    WorkerLaunching,
    WorkerMetric,
    WorkerProgress,
    WorkerResult,
    WorkerRunning,
    tag_of,
)
from cairn.events.base import Event


class TimelineEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One stored message of a stream, for people and for `-o json`.

    Attributes:
        seq: Its stream sequence.
        at: When the fact happened (the event's `at`; the store time if it did not decode).
        subject: The subject it was stored on.
        type: The event tag, or `undecodable`.
        job: The job it belongs to, if any.
        summary: One short line saying what happened.
    """

    seq: int
    at: datetime | None
    subject: str
    type: str
    job: str | None = None
    summary: str = ""


def entry(item: Replayed[Any]) -> TimelineEntry:
    """The timeline entry of one replayed message."""
    event = item.event
    if not isinstance(event, Event):
        return TimelineEntry(
            seq=item.seq,
            at=item.time,
            subject=item.subject,
            type="undecodable",
            summary=f"undecodable: {item.error or '?'}",
        )
    job = getattr(event, "job", None)
    return TimelineEntry(
        seq=item.seq,
        at=event.at,
        subject=item.subject,
        type=tag_of(event),
        job=job if isinstance(job, str) else None,
        summary=summary(event),
    )


def format_line(e: TimelineEntry) -> str:
    """`#12 10:31:02.120 j-01h... site-a client/0 exited code=0`."""
    when = e.at.strftime("%H:%M:%S.%f")[:-3] if e.at else "--:--:--.---"
    job = f"{e.job} " if e.job else ""
    return f"#{e.seq:<5} {when} {job}{e.summary}"


def _worker(site: str, role: str, rank: int) -> str:
    return f"{site} {role}/{rank}"


def summary(event: Event) -> str:
    """A short human line for one event (without its job id, which `format_line` adds)."""
    match event:
        case StudyCreated():
            return (
                f"study {event.name} created (sites: {', '.join(event.sites) or 'none'}; "
                f"admins: {', '.join(a.name for a in event.admins) or 'none'})"
            )
        case StudySiteAdded():
            return f"site {event.site} joined the study"
        case StudySiteRemoved():
            return f"site {event.site} left the study"
        case StudyAdminAdded():
            return f"admin {event.admin.name} ({event.admin.org}, {event.admin.role}) added"
        case StudyAdminRemoved():
            return f"admin {event.name} removed"
        case StudyHold():
            if not event.held:
                return "queue released"
            return "queue held" + (f": {event.reason}" if event.reason else "")
        case StudyTerm():
            return f"{event.service} term {event.term} begins ({event.holder})"
        case JobSubmitted():
            roles = ", ".join(r.name for r in event.roles)
            by = f" by {event.actor}" if event.actor else ""
            rerun = f" (rerun of {event.rerun_of})" if event.rerun_of else ""
            return f"submitted {event.name} [{roles}]{by}{rerun}"
        case JobQueued():
            why = "; ".join(f"{k}: {v}" for k, v in sorted(event.reasons.items()))
            return f"queued{': ' + why if why else ''}"
        case JobDispatched():
            where = ", ".join(f"{d.site} {d.role}/{d.rank}" for d in event.deployments)
            return f"dispatched to {where}"
        case JobRunning():
            return "running"
        case JobEnding():
            waiting = ", ".join(event.waiting) or "none"
            return (f"server role finished; waiting up to {event.end_grace_s:g}s for "
                    f"{waiting} to exit")
        case JobCancelRequested():
            return f"cancel requested ({event.reason})"
        case JobCompleted():
            return "completed"
        case JobFailed():
            return f"failed cause={event.reason}{': ' + event.message if event.message else ''}"
        case JobAborted():
            return f"aborted cause={event.reason}{': ' + event.message if event.message else ''}"
        case JobUnschedulable():
            why = "; ".join(f"{k}: {v}" for k, v in sorted(event.reasons.items()))
            return f"unschedulable{': ' + why if why else ''}"
        case DeployCommand():
            return f"deploy {event.role}/{event.rank} to {event.site} (attempt {event.attempt})"
        case CancelCommand():
            return f"cancel at {event.site} ({event.reason})"
        case DeploymentAccepted():
            gpus = f" gpus={','.join(event.gpus)}" if event.gpus else ""
            return f"{_worker(event.site, event.role, event.rank)} accepted{gpus}"
        case DeploymentRejected():
            return (
                f"{_worker(event.site, event.role, event.rank)} rejected "
                f"cause={event.reason}: {event.message}"
            )
        case WorkerLaunching():
            return f"{_worker(event.site, event.role, event.rank)} launching ({event.backend})"
        case WorkerRunning():
            return f"{_worker(event.site, event.role, event.rank)} running"
        case WorkerExited():
            cause = f" cause={event.reason}" if event.reason else ""
            # A clean exit's message only repeats the code.
            msg = (
                f": {event.message}" if event.message and (event.reason or event.exit_code) else ""
            )
            return (
                f"{_worker(event.site, event.role, event.rank)} exited "
                f"code={event.exit_code}{cause}{msg}"
            )
        case WorkerProgress():
            step = f" {event.step}/{event.total}" if event.step is not None else ""
            msg = f" {event.message}" if event.message else ""
            return f"{_worker(event.site, event.role, event.rank)} progress{step}{msg}"
        case WorkerMetric():
            values = " ".join(f"{k}={v:g}" for k, v in sorted(event.values.items()))
            step = f" step={event.step}" if event.step is not None else ""
            return f"{_worker(event.site, event.role, event.rank)} metric{step} {values}"
        case WorkerResult():
            files = f" files={len(event.files)}" if event.files else ""
            return f"{_worker(event.site, event.role, event.rank)} result{files}"
        case DeadLettered():
            return f"dead-lettered {event.subject} from {event.stream}: {event.error}"
    return tag_of(event)
