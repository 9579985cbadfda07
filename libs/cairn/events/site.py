"""A job's life at one site: agent decisions, launcher facts, and coordinator commands.

Subjects: `cairn.study.<study>.job.<job>.site.<site>.<verb>` (agent, launcher) and
`cairn.study.<study>.site.<site>.cmd.<verb>` (coordinator -> agent).
"""

from __future__ import annotations

from typing import Any

import msgspec

from cairn.events.base import Event
from cairn.events.job import Resources
from cairn.events.workerref import OfWorkerAttempt
from cairn.events.workflow import PrivacyRule


class DeployCommand(OfWorkerAttempt, tag="cmd.deploy", frozen=True, kw_only=True):
    """Coordinator asks a site's agent to run one worker of a job."""

    entrypoint: str
    resources: Resources = Resources()
    image: str | None = None
    code_digest: str | None = None
    params: dict[str, Any] = {}
    timeout_s: float = 3600.0
    peers: int = 1
    nodes: int = 1
    """Nodes the worker spans (`resources` is per node); more than 1 needs a multi-node
    backend."""
    receipt: dict[str, Any] | None = None
    """For a job that requires a recipe: the coordinator's signed receipt (a DSSE envelope
    around a SLSA VSA v1 statement) naming the evidence that made this site eligible."""
    privacy: PrivacyRule | None = None
    """The job's privacy filters (`workflow.privacy`), for the site to merge with its own."""


class CancelCommand(Event, tag="cmd.cancel", frozen=True, kw_only=True):
    """Coordinator asks a site's agent to stop every worker of a job there."""

    job: str
    site: str
    reason: str = "cancelled"
    grace_s: float = 10.0


class DeploymentAccepted(OfWorkerAttempt, tag="deployment.accepted", frozen=True, kw_only=True):
    launch_id: str
    gpus: list[str] = []
    resources: Resources = Resources()
    privacy: PrivacyRule | None = None
    """The filters this site enforces on what the worker sends (its study_runtime.yaml rule
    merged with the job's, the site's winning); the worker SDK reads them from here."""


class DeploymentRejected(OfWorkerAttempt, tag="deployment.rejected", frozen=True, kw_only=True):
    """The site's policy refused a worker: `reason` is the closed-set cause (site-policy,
    image-not-approved, over-study-limit) and `message` says what to change.
    `missing_capability` names what the site's backend cannot do (`gpu`, `multi-node`,
    `containers`) when that is why; "" otherwise."""

    reason: str
    message: str
    missing_capability: str = ""


class WorkerLaunching(OfWorkerAttempt, tag="worker.launching", frozen=True, kw_only=True):
    launch_id: str
    backend: str


class WorkerAllocation(msgspec.Struct, frozen=True, kw_only=True):
    """What the site allocated to a worker, which the worker proves before its code runs
    (`CAIRN_ALLOCATION`, cairn.worker.allocation): GPUs asked for (per node), the device ids
    given (empty where the platform picks them), CPUs pinned to, memory limit in bytes."""

    gpus: int = 0
    gpu_ids: list[str] = []
    cpus: list[int] = []
    memory_bytes: int = 0


class WorkerRunning(OfWorkerAttempt, tag="worker.running", frozen=True, kw_only=True):
    """The backend started the worker. `allocation` is what it was given; a worker that can
    use other GPUs than that ends at once with cause `allocation-mismatch`."""

    launch_id: str
    native_id: str = ""
    allocation: WorkerAllocation | None = None


class WorkerExited(OfWorkerAttempt, tag="worker.exited", frozen=True, kw_only=True):
    """A worker ended. `reason` is the closed-set cause, None for a clean exit (code 0)."""

    launch_id: str
    exit_code: int | None = None
    reason: str | None = None
    message: str = ""


SiteCommand = DeployCommand | CancelCommand
SiteJobEvent = (
    DeploymentAccepted | DeploymentRejected | WorkerLaunching | WorkerRunning | WorkerExited
)
