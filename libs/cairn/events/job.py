"""Job events (coordinator), on `cairn.study.<study>.job.<job>.<verb>`."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from cairn.events.base import Event
from cairn.events.workerref import WorkerRef
from cairn.events.workflow import WorkflowRequest

Placement = Literal["hub", "sites"]


class Resources(msgspec.Struct, frozen=True, kw_only=True):
    """Resource amounts in integers, so arithmetic is exact: what a worker asks for, what a
    site has or has free, what a study may use. The one resource type of Cairn.

    The defaults (1 CPU, 512Mi) are what a role gets when its spec leaves a field out; an
    amount of nothing is `Resources.zero()`.

    Attributes:
        gpus: Whole GPUs.
        millicpus: CPUs in thousandths (`1.5` CPUs is 1500).
        memory_bytes: Memory in bytes.
    """

    gpus: int = 0
    millicpus: int = 1000
    memory_bytes: int = 512 * 1024 * 1024

    @staticmethod
    def zero() -> Resources:
        return Resources(gpus=0, millicpus=0, memory_bytes=0)

    def __add__(self, other: Resources) -> Resources:
        return Resources(gpus=self.gpus + other.gpus, millicpus=self.millicpus + other.millicpus,
                         memory_bytes=self.memory_bytes + other.memory_bytes)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(gpus=self.gpus - other.gpus, millicpus=self.millicpus - other.millicpus,
                         memory_bytes=self.memory_bytes - other.memory_bytes)

    def times(self, count: int) -> Resources:
        """`count` of these (a worker on `count` nodes holds its resources on each)."""
        return Resources(gpus=self.gpus * count, millicpus=self.millicpus * count,
                         memory_bytes=self.memory_bytes * count)

    def fits_in(self, available: Resources) -> bool:
        """True when every amount is at most what `available` holds."""
        return (self.gpus <= available.gpus and self.millicpus <= available.millicpus
                and self.memory_bytes <= available.memory_bytes)

    def shortfall(self, available: Resources) -> list[str]:
        """For people: what `available` lacks to hold this, one phrase per resource."""
        lacks = []
        if available.gpus < self.gpus:
            lacks.append(f"gpus {available.gpus} free < {self.gpus}")
        if available.millicpus < self.millicpus:
            lacks.append(f"cpus {available.millicpus / 1000:g} free < {self.millicpus / 1000:g}")
        if available.memory_bytes < self.memory_bytes:
            lacks.append(f"memory {available.memory_bytes >> 20}Mi free < "
                         f"{self.memory_bytes >> 20}Mi")
        return lacks

    def describe(self) -> str:
        """For people: `2 gpus, 1.5 cpus, 4Gi memory`."""
        from cairn.spec.quantity import format_cpus, format_memory

        return (f"{self.gpus} gpus, {format_cpus(self.millicpus)} cpus, "
                f"{format_memory(self.memory_bytes)} memory")


class RoleRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One role of a submitted job.

    Attributes:
        sites: The sites it may run on; None means all of the study's sites.
        min_sites: Sites needed to start and to finish (sites placement only).
        nodes: Nodes each worker spans; `resources` is what it needs on each node.
    """

    name: str
    entrypoint: str
    resources: Resources = Resources()
    placement: Placement = "sites"
    sites: list[str] | None = None
    min_sites: int | None = None
    nodes: int = 1


class RecipeRequirement(msgspec.Struct, frozen=True, kw_only=True):
    recipe: str
    max_age_s: int | None = None
    signers: list[str] = []
    """Signer names or roles of which one must have signed the evidence (empty: any
    trusted signer)."""


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
    end_grace_s: float = 30.0
    """Once the hub role (an FL job's server) finished, how long the other workers have to
    exit on their own before they are stopped (cause `outlived-server`)."""
    workflow: WorkflowRequest | None = None
    """The job's federated workflow and privacy filters (`workflow:` in job.yaml)."""


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

    def worker(self, job: str) -> WorkerRef:
        return WorkerRef(job=job, site=self.site, role=self.role, rank=self.rank,
                         attempt=self.attempt)


class JobDispatched(Event, tag="job.dispatched", frozen=True, kw_only=True):
    job: str
    deployments: list[Deployment]


class JobRunning(Event, tag="job.running", frozen=True, kw_only=True):
    job: str


class JobEnding(Event, tag="job.ending", frozen=True, kw_only=True):
    """The job's hub role (an FL job's server) finished with exit 0 while other workers
    still run: they have `end_grace_s` from now to exit on their own, then they are stopped
    (cause `outlived-server`). The job stays `running` until every worker has exited.

    Attributes:
        waiting: The workers still running (`site/role/rank`).
    """

    job: str
    end_grace_s: float
    waiting: list[str] = []


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
    JobSubmitted | JobQueued | JobDispatched | JobRunning | JobEnding | JobCancelRequested
    | JobCompleted | JobFailed | JobAborted | JobUnschedulable
)
