"""Every answer on `cairn.api.*`: a `Reply` holding one `Result` (a tagged union) or an error.

    {"ok": true,  "result": {"type": "submitted", "job": "j-..."}}
    {"ok": false, "error": {"code": "permission-denied", "message": "...", "field": null}}

`error.code` names the `cairn.errors` class (`invalid`, `not-found`, `permission-denied`, ...),
so a client raises exactly the error the service decided.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from cairn.errors import CairnError, from_dict
from cairn.events import Resources, SnapshotRecorded, StudyAdmin
from cairn.state.job import JobState
from cairn.state.study import StudyState


class SiteInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A site as the coordinator sees it (org from federation.yaml, the rest from heartbeats)."""

    name: str
    org: str = ""
    online: bool = False
    last_seen: datetime | None = None
    backend: str = ""
    capacity: Resources | None = None
    free: Resources | None = None
    running: int = 0
    studies: tuple[str, ...] = ()
    hub: bool = False


class FederationInfo(msgspec.Struct, frozen=True, kw_only=True):
    federation: str
    hub: str
    sites: tuple[str, ...] = ()
    admins: tuple[StudyAdmin, ...] = ()
    studies: tuple[str, ...] = ()


class _Result(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    pass


class StudyResult(_Result, tag="study", frozen=True, kw_only=True):
    study: StudyState


class StudiesResult(_Result, tag="studies", frozen=True, kw_only=True):
    studies: list[StudyState]


class SitesResult(_Result, tag="sites", frozen=True, kw_only=True):
    sites: list[SiteInfo]


class SiteResult(_Result, tag="site", frozen=True, kw_only=True):
    site: SiteInfo


class FederationResult(_Result, tag="federation", frozen=True, kw_only=True):
    federation: FederationInfo


class JobsResult(_Result, tag="jobs", frozen=True, kw_only=True):
    jobs: list[JobState]


class JobResult(_Result, tag="job", frozen=True, kw_only=True):
    job: JobState


class Submitted(_Result, tag="submitted", frozen=True, kw_only=True):
    job: str


class CancelAccepted(_Result, tag="cancel", frozen=True, kw_only=True):
    """The cancel was recorded (`state` is `cancelling`), or the job had already ended."""

    job: str
    state: str


class SnapshotTaken(_Result, tag="snapshot", frozen=True, kw_only=True):
    recorded: SnapshotRecorded


class LogData(_Result, tag="log", frozen=True, kw_only=True):
    """A piece of a worker's log: bytes in base64, where to read on, and whether it ended."""

    data_b64: str
    offset: int
    done: bool


class ValidationAccepted(_Result, tag="validation", frozen=True, kw_only=True):
    run: str
    site: str
    recipe: str
    actor: str | None = None


class EvidenceAccepted(_Result, tag="evidence", frozen=True, kw_only=True):
    """A submitted bundle was stored: its object name, what it is about, whether its signer is
    trusted here."""

    bundle: str
    site: str
    recipe: str
    result: str
    trusted: bool
    signature: str = ""


Result = (
    StudyResult | StudiesResult | SitesResult | SiteResult | FederationResult | JobsResult
    | JobResult | Submitted | CancelAccepted | SnapshotTaken | LogData | ValidationAccepted
    | EvidenceAccepted
)
"""Every result, one tagged union."""


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A typed error: `code` names the `cairn.errors` class; file/line/field where known."""

    code: str
    message: str
    field: str | None = None
    file: str | None = None
    line: int | None = None

    @classmethod
    def of(cls, exc: CairnError) -> ErrorBody:
        return cls(code=exc.code, message=exc.message, field=exc.field, file=exc.file,
                   line=exc.line)

    def error(self) -> CairnError:
        """The error to raise on the client side."""
        return from_dict(msgspec.structs.asdict(self))


class Reply(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    ok: bool
    result: Result | None = None
    error: ErrorBody | None = None
