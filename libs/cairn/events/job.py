"""Job events (coordinator), on `cairn.study.<study>.job.<job>.<verb>`."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from cairn.events.base import Event

Placement = Literal["hub", "sites"]


class Resources(msgspec.Struct, frozen=True, kw_only=True):
    """What one worker asks for, normalized: whole GPUs, millicpus, bytes."""

    gpus: int = 0
    millicpus: int = 1000
    memory_bytes: int = 512 * 1024 * 1024


class RoleRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One role of a submitted job.

    Attributes:
        sites: The sites it may run on; None means all of the study's sites.
        min_sites: Sites needed to start and to finish (sites placement only).
    """

    name: str
    entrypoint: str
    resources: Resources = Resources()
    placement: Placement = "sites"
    sites: list[str] | None = None
    min_sites: int | None = None


class RecipeRequirement(msgspec.Struct, frozen=True, kw_only=True):
    recipe: str
    max_age_s: int | None = None


class JobSubmitted(Event, tag="job.submitted", frozen=True, kw_only=True):
    """A job was accepted for scheduling. It holds everything needed to run it again."""

    job: str
    name: str
    roles: list[RoleRequest]
    code_digest: str | None = None
    image: str | None = None
    params: dict[str, Any] = {}
    timeout_s: float = 3600.0
    retries: int = 0
    queue_timeout_s: float = 600.0
    requires: RecipeRequirement | None = None
    rerun_of: str | None = None


class JobQueued(Event, tag="job.queued", frozen=True, kw_only=True):
    """The job waits for capacity; `reasons` says what each site lacks."""

    job: str
    reasons: dict[str, str] = {}


class Deployment(msgspec.Struct, frozen=True, kw_only=True):
    """One worker of a job placed on one site."""

    site: str
    role: str
    rank: int = 0
    attempt: int = 0


class JobDispatched(Event, tag="job.dispatched", frozen=True, kw_only=True):
    job: str
    deployments: list[Deployment]


class JobRunning(Event, tag="job.running", frozen=True, kw_only=True):
    job: str


class JobCancelRequested(Event, tag="job.cancel-requested", frozen=True, kw_only=True):
    job: str
    reason: str = "cancelled"


class JobCompleted(Event, tag="job.completed", frozen=True, kw_only=True):
    job: str


class JobFailed(Event, tag="job.failed", frozen=True, kw_only=True):
    """The job failed. `reason` is one of JOBSPEC's closed set of causes (`cause` is the
    id of the event that led here, as on every event)."""

    job: str
    reason: str
    message: str = ""


class JobAborted(Event, tag="job.aborted", frozen=True, kw_only=True):
    job: str
    reason: str = "cancelled"
    message: str = ""


class JobUnschedulable(Event, tag="job.unschedulable", frozen=True, kw_only=True):
    job: str
    reason: Literal["unschedulable"] = "unschedulable"
    reasons: dict[str, str] = {}


JOB_TERMINAL = ("job.completed", "job.failed", "job.aborted", "job.unschedulable")

JobEvent = (
    JobSubmitted | JobQueued | JobDispatched | JobRunning | JobCancelRequested | JobCompleted
    | JobFailed | JobAborted | JobUnschedulable
)
