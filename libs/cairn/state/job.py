"""The job aggregate: a pure fold over a job's events. It never moves backwards.

Job states: submitted -> queued -> dispatched -> running -> completed | failed | aborted |
unschedulable. Per worker: deploying -> accepted | rejected -> launching -> running -> exited.
A job whose hub role finished while other workers still run stays `running`, with
`ending_at` set (`job.ending`), until they have exited.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from cairn.events import (
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
    OfWorker,
    ResultFile,
    WorkerExited,
    WorkerLaunching,
    WorkerMetric,
    WorkerProgress,
    WorkerResult,
    WorkerRunning,
)

JOB_ORDER = {"submitted": 0, "queued": 1, "dispatched": 2, "running": 3, "completed": 4,
             "failed": 4, "aborted": 4, "unschedulable": 4}
WORKER_ORDER = {"deploying": 0, "accepted": 1, "rejected": 4, "launching": 2, "running": 3,
                "exited": 4}
TERMINAL = frozenset({"completed", "failed", "aborted", "unschedulable"})


class WorkerState(msgspec.Struct, frozen=True, kw_only=True):
    """One worker of a job at one site."""

    site: str
    role: str
    rank: int = 0
    attempt: int = 0
    state: str = "deploying"
    launch_id: str = ""
    exit_code: int | None = None
    cause: str | None = None
    message: str = ""
    gpus: tuple[str, ...] = ()
    progress: str = ""
    step: int | None = None
    total: int | None = None
    metrics: dict[str, float] = {}
    updated_at: datetime | None = None

    @property
    def key(self) -> str:
        return worker_key(self.site, self.role, self.rank)

    @property
    def failed(self) -> bool:
        return self.state == "rejected" or (self.state == "exited" and self.exit_code != 0)


class JobResult(msgspec.Struct, frozen=True, kw_only=True):
    site: str
    role: str
    rank: int = 0
    value: Any = None
    files: tuple[ResultFile, ...] = ()


class JobState(msgspec.Struct, frozen=True, kw_only=True):
    """A job as its events made it; `spec` is the submission, enough to run it again."""

    job: str
    study: str
    name: str
    state: str = "submitted"
    spec: JobSubmitted
    actor: str | None = None
    submitted_at: datetime
    updated_at: datetime
    dispatched_at: datetime | None = None
    ended_at: datetime | None = None
    cause: str | None = None
    message: str = ""
    reasons: dict[str, str] = {}
    cancel_requested: bool = False
    workers: dict[str, WorkerState] = {}
    results: tuple[JobResult, ...] = ()
    ending_at: datetime | None = None
    """When the coordinator saw the hub role finish with workers still running
    (`job.ending`); they have the spec's `end_grace_s` from then to exit."""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def hub_finished(self) -> bool:
        """Every worker of the job's hub roles (an FL job's server) exited 0: its work is
        done, and the job ends once the other workers have exited too."""
        hub = {r.name for r in self.spec.roles if r.placement == "hub"}
        workers = [w for w in self.workers.values() if w.role in hub]
        return bool(workers) and all(w.state == "exited" and w.exit_code == 0
                                     for w in workers)

    def still_running(self) -> list[WorkerState]:
        """The workers that have neither exited nor been rejected, in key order."""
        return [w for _, w in sorted(self.workers.items())
                if w.state not in ("exited", "rejected")]


def worker_key(site: str, role: str, rank: int) -> str:
    return f"{site}/{role}/{rank}"


def _advance(job: JobState, state: str, at: datetime, **changes: Any) -> JobState:
    if job.terminal or JOB_ORDER[state] < JOB_ORDER[job.state]:
        return job
    if state in TERMINAL:
        changes.setdefault("ended_at", at)
    return msgspec.structs.replace(job, state=state, updated_at=at, **changes)


def _worker(job: JobState, event: OfWorker, state: str | None = None,
            **changes: Any) -> JobState:
    """The job once `event` happened to one of its workers (keyed by site, role and rank:
    a worker's attempts share its row)."""
    at = event.at
    key = worker_key(event.site, event.role, event.rank)
    current = job.workers.get(key) or WorkerState(site=event.site, role=event.role,
                                                  rank=event.rank)
    if state is not None:
        if WORKER_ORDER[state] < WORKER_ORDER[current.state] or current.state in (
                "exited", "rejected"):
            return job
        changes["state"] = state
    updated = msgspec.structs.replace(current, updated_at=at, **changes)
    return msgspec.structs.replace(job, workers={**job.workers, key: updated}, updated_at=at)


def apply(job: JobState | None, event: object) -> JobState | None:
    """Apply one event of this job (`None` until `job.submitted`)."""
    if isinstance(event, JobSubmitted):
        if job is not None:
            return job
        return JobState(job=event.job, study=event.study or "", name=event.name, spec=event,
                        actor=event.actor, submitted_at=event.at, updated_at=event.at)
    if job is None:
        return None
    match event:
        case JobQueued():
            return _advance(job, "queued", event.at, reasons=event.reasons)
        case JobDispatched():
            if job.dispatched_at is not None or job.terminal:
                return job
            workers = dict(job.workers)
            for d in event.deployments:
                key = worker_key(d.site, d.role, d.rank)
                workers.setdefault(key, WorkerState(site=d.site, role=d.role, rank=d.rank,
                                                    attempt=d.attempt, updated_at=event.at))
            job = msgspec.structs.replace(job, workers=workers, dispatched_at=event.at)
            return _advance(job, "dispatched", event.at, reasons={})
        case JobRunning():
            return _advance(job, "running", event.at)
        case JobEnding():
            if job.terminal or job.ending_at is not None:
                return job
            return msgspec.structs.replace(job, ending_at=event.at, updated_at=event.at)
        case JobCancelRequested():
            if job.terminal:
                return job
            return msgspec.structs.replace(job, cancel_requested=True, updated_at=event.at)
        case JobCompleted():
            return _advance(job, "completed", event.at)
        case JobFailed():
            return _advance(job, "failed", event.at, cause=event.reason, message=event.message)
        case JobAborted():
            return _advance(job, "aborted", event.at, cause=event.reason, message=event.message)
        case JobUnschedulable():
            return _advance(job, "unschedulable", event.at, cause=event.reason,
                            reasons=event.reasons, message="; ".join(
                                f"{k}: {v}" for k, v in sorted(event.reasons.items())))
        case DeploymentAccepted():
            return _worker(job, event, "accepted", launch_id=event.launch_id,
                           gpus=tuple(event.gpus))
        case DeploymentRejected():
            return _worker(job, event, "rejected", cause=event.reason, message=event.message)
        case WorkerLaunching():
            return _worker(job, event, "launching", launch_id=event.launch_id)
        case WorkerRunning():
            return _worker(job, event, "running")
        case WorkerExited():
            return _worker(job, event, "exited", exit_code=event.exit_code,
                           cause=event.reason, message=event.message)
        case WorkerProgress():
            return _worker(job, event, progress=event.message, step=event.step,
                           total=event.total)
        case WorkerMetric():
            current = job.workers.get(worker_key(event.site, event.role, event.rank))
            metrics = {**(current.metrics if current else {}), **event.values}
            return _worker(job, event, metrics=metrics, step=event.step)
        case WorkerResult():
            result = JobResult(site=event.site, role=event.role, rank=event.rank,
                               value=event.value, files=tuple(event.files))
            return msgspec.structs.replace(job, results=(*job.results, result),
                                           updated_at=event.at)
    return job
