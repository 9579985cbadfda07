"""A worker's key: the job, site, role, rank and attempt that every worker event and record
carries, declared once.

On the wire the five fields stay flat (schemas/ is a public contract): the events that carry
them inherit their declaration from `OfWorker` / `OfWorkerAttempt`, and everything that copies
them from one event or record into the next goes through a `WorkerRef`:

    ref = worker_ref(cmd)                          # from any event or record with the five
    DeploymentAccepted(**envelope(...), **ref.fields(), launch_id=ref.launch_id, ...)

`ref.fields()` is a TypedDict, so mypy checks its keys against the constructor it is spread
into: a field left out, or given twice, is a type error, not a drifted copy.
"""

from __future__ import annotations

from typing import Protocol, TypedDict

import msgspec

from cairn.events.base import Event


def make_launch_id(job: str, site: str, role: str, rank: int, attempt: int) -> str:
    """The deterministic launch id, `<job>/<site>/<role>/<rank>/<attempt>`.

    The agent builds it when it accepts a deployment and the launcher keys its records by it:
    one id per worker attempt is what makes a replayed command start nothing new. Rank is
    part of it so two ranks of one role at one site never share a working directory.
    """
    return f"{job}/{site}/{role}/{rank}/{attempt}"


class ReportFields(TypedDict):
    """The four fields a worker's own reports carry (progress, metric, result): their subject
    names no attempt, so neither do they."""

    job: str
    site: str
    role: str
    rank: int


class WorkerFields(ReportFields):
    """The five fields of one worker attempt, to spread into an event's or record's
    constructor: `WorkerExited(**ref.fields(), ...)`."""

    attempt: int


class LaunchFields(WorkerFields):
    """The fields every record of one launch starts with (`WorkerLaunch`)."""

    launch_id: str
    study: str


class WorkerRef(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt of one worker of a job.

    Attributes:
        job: The job.
        site: The site it runs at.
        role: Its role (`server`, `client`, ...).
        rank: Its rank within the role at that site.
        attempt: Which attempt, from 0.
    """

    job: str
    site: str
    role: str
    rank: int = 0
    attempt: int = 0

    @property
    def launch_id(self) -> str:
        """`<job>/<site>/<role>/<rank>/<attempt>`: the idempotency key of its launch."""
        return make_launch_id(self.job, self.site, self.role, self.rank, self.attempt)

    def fields(self) -> WorkerFields:
        return {"job": self.job, "site": self.site, "role": self.role, "rank": self.rank,
                "attempt": self.attempt}

    def report_fields(self) -> ReportFields:
        """The fields of the worker's own reports (no attempt: see `ReportFields`)."""
        return {"job": self.job, "site": self.site, "role": self.role, "rank": self.rank}

    def launch_fields(self, study: str, launch_id: str | None = None) -> LaunchFields:
        """The fields of a record of its launch in `study`; `launch_id` where the record
        keeps the one a command named (the launch guard made sure it is this worker's)."""
        return {"launch_id": self.launch_id if launch_id is None else launch_id,
                "study": study, **self.fields()}


class HasWorkerFields(Protocol):
    """Anything that carries the five fields: an event of a worker attempt, a launch record."""

    @property
    def job(self) -> str: ...
    @property
    def site(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def rank(self) -> int: ...
    @property
    def attempt(self) -> int: ...


def worker_ref(of: HasWorkerFields) -> WorkerRef:
    """The worker attempt an event or record is about."""
    return WorkerRef(job=of.job, site=of.site, role=of.role, rank=of.rank, attempt=of.attempt)


class WorkerLaunch(msgspec.Struct, frozen=True, kw_only=True):
    """What every record of one launch starts with: the launcher's launch states and KV
    records, and the backend's launch spec.

    Attributes:
        launch_id: `make_launch_id(...)` of the worker below: the records' key.
        study: The study of the job.
        job: The job.
        site: The site it runs at.
        role: The worker's role.
        rank: Its rank within the role at that site.
        attempt: Which attempt, from 0.
    """

    launch_id: str
    study: str
    job: str
    site: str
    role: str
    rank: int = 0
    attempt: int = 0

    def launch_fields(self) -> LaunchFields:
        """These fields, to start another record of the same launch with."""
        return {"launch_id": self.launch_id, "study": self.study, "job": self.job,
                "site": self.site, "role": self.role, "rank": self.rank,
                "attempt": self.attempt}


# Neither base is tagged (`tag=False`): no event is ever just an `OfWorker`, so no decoder or
# schema names them. Their fields come right after the envelope's, in the order the events
# always had them, so inheriting them leaves every encoding and schema as it was
# (`make check-schemas`).

class OfWorker(Event, frozen=True, kw_only=True, tag=False):
    """An event about one worker of a job, without its attempt: the worker's own reports.

    Attributes:
        job: The job.
        site: The site the worker runs at.
        role: The worker's role.
        rank: Its rank within the role at that site.
    """

    job: str
    site: str
    role: str
    rank: int = 0


class OfWorkerAttempt(OfWorker, frozen=True, kw_only=True, tag=False):
    """An event about one attempt of one worker: commands, decisions and launcher facts.

    Attributes:
        attempt: Which attempt, from 0.
    """

    attempt: int = 0

