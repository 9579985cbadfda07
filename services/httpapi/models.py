"""What the HTTP API answers with: msgspec Structs, from which the OpenAPI document is made.

New fields get defaults; a field is never renamed, retyped or removed without a new major
version (`schemas/openapi.json` is checked against `schemas/baseline/openapi.json`).
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from cairn.state.job import JobState


class MetricPoint(msgspec.Struct, frozen=True, kw_only=True):
    """One reported metric set of one worker: a FedAvg round's accuracy and loss.

    Attributes:
        seq: The event's stream sequence.
        at: When the worker reported it.
        site: The worker's site.
        role: The worker's role.
        rank: The worker's rank within its role.
        step: The round (or step) it belongs to.
        values: Name -> value.
    """

    seq: int
    at: datetime
    site: str
    role: str
    rank: int = 0
    step: int | None = None
    values: dict[str, float] = {}


class TimelineItem(msgspec.Struct, frozen=True, kw_only=True):
    """One stored event of a study, as `cairn replay` and `cairn events tail` print it
    (`cairn.client.timeline.TimelineEntry`, field for field).

    Attributes:
        seq: Its stream sequence (an SSE event's `id`).
        at: When the fact happened.
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


class ApiError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Every error the API answers with: one JSON object, never a traceback.

    Attributes:
        status: The HTTP status, repeated.
        code: Cairn's error code (`invalid`, `not-found`, `permission-denied`, ...).
        message: What went wrong, for a person.
        field: The field, parameter or header at fault.
    """

    status: int
    code: str
    message: str
    field: str | None = None


class Whoami(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    kind: str
    studies: list[str]
    secure: bool


class StudySummary(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str = ""
    sites: list[str] = []
    admins: list[str] = []
    created_at: datetime | None = None
    jobs: int = 0
    last_seq: int = 0


class StudiesPage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[StudySummary]
    total: int
    offset: int
    limit: int


class WorkerSummary(msgspec.Struct, frozen=True, kw_only=True):
    site: str
    role: str
    rank: int = 0
    state: str = ""
    step: int | None = None
    total: int | None = None
    exit_code: int | None = None


class JobSummary(msgspec.Struct, frozen=True, kw_only=True):
    job: str
    study: str
    name: str
    state: str
    actor: str | None = None
    submitted_at: datetime
    updated_at: datetime
    ended_at: datetime | None = None
    message: str = ""
    workers: list[WorkerSummary] = []


class JobsPage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[JobSummary]
    total: int
    offset: int
    limit: int


class JobDetail(msgspec.Struct, frozen=True, kw_only=True):
    summary: JobSummary
    state: JobState


class TimelinePage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[TimelineItem]
    total: int
    offset: int
    limit: int


class JobMetrics(msgspec.Struct, frozen=True, kw_only=True):
    job: str
    points: list[MetricPoint]
    names: list[str] = []


class Drift(msgspec.Struct, frozen=True, kw_only=True):
    at: datetime
    previous: str
    current: str
    changes: list[dict[str, object]] = []


class SiteSummary(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    backend: str = ""
    capabilities: list[str] = []
    snapshot_digest: str = ""
    snapshot_at: datetime | None = None
    nodes: int = 0
    drift: Drift | None = None
    validations: dict[str, str] = {}
    """Recipe -> the status of its latest validation run here."""


class SitesPage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[SiteSummary]
    total: int
    offset: int
    limit: int


class Eligibility(msgspec.Struct, frozen=True, kw_only=True):
    site: str
    recipe: str
    eligible: bool
    reason: str = ""
    message: str = ""
    evidence: str = ""
    until: datetime | None = None


class RecipeSummary(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str = ""
    criteria: dict[str, object] = {}
    status: str = "UNTESTED"
    """CONFIRMED, SINGLE, CONTESTED, FAILING or UNTESTED (`docs/evidence.md`)."""
    signers: list[str] = []
    hardware: list[str] = []
    checks: list[str] = []


class RecipesPage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[RecipeSummary]
    total: int
    offset: int
    limit: int


class RecipeExplained(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    applied: list[str]
    values: list[dict[str, object]]


class EvidenceItem(msgspec.Struct, frozen=True, kw_only=True):
    site: str
    recipe: str
    bundle: str
    result: str = ""
    validated_at: datetime | None = None
    seq: int = 0


class EvidencePage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[EvidenceItem]
    total: int
    offset: int
    limit: int


class EvidenceCheck(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    ok: bool
    reason: str = ""
    message: str = ""


class EvidenceVerified(msgspec.Struct, frozen=True, kw_only=True):
    bundle: str
    valid: bool
    checks: list[EvidenceCheck]
    signers: list[str] = []
