"""Streams and buckets: names and subjects from the subject table, settings from here."""

from __future__ import annotations

from dataclasses import dataclass, field

from cairn.names import check_name, is_name
from cairn.subjects.table import fill_with, stream_row


@dataclass(frozen=True)
class StreamSpec:
    """A JetStream stream Cairn owns."""

    name: str
    subjects: tuple[str, ...]
    max_age_s: float = 0.0
    max_bytes: int = -1
    deny_delete: bool = False
    deny_purge: bool = False
    duplicate_window_s: float = 120.0
    description: str = ""
    allow_rollup: bool = False
    extra: dict[str, object] = field(default_factory=dict)


def _spec(template: str, **tokens: str) -> StreamSpec:
    row = stream_row(template)
    return StreamSpec(name=fill_with(row.name, tokens),
                      subjects=tuple(fill_with(s, tokens) for s in row.subjects),
                      description=row.doc + (f" ({', '.join(tokens.values())})" if tokens
                                             else ""))


STUDY_STREAM_PREFIX = "STUDY_"


def study_of_stream(name: str) -> str | None:
    """The study a `STUDY_<study>` stream belongs to; None for any other stream."""
    if not name.startswith(STUDY_STREAM_PREFIX):
        return None
    study = name[len(STUDY_STREAM_PREFIX):]
    return study if is_name(study) else None


def study_stream(study: str) -> StreamSpec:
    return _spec("STUDY_{study}", study=check_name(study, "study"))


def data_stream(study: str) -> StreamSpec:
    # The data plane is kept for audit with limited retention and never folded.
    spec = _spec("DATA_{study}", study=check_name(study, "study"))
    return StreamSpec(name=spec.name, subjects=spec.subjects, max_age_s=24 * 3600.0,
                      max_bytes=1 << 30, description=spec.description)


def files_stream(study: str) -> StreamSpec:
    # A file's meta record is rolled up on rewrite, so a job's files can be replaced whole.
    spec = _spec("FILES_{study}", study=check_name(study, "study"))
    return StreamSpec(name=spec.name, subjects=spec.subjects, description=spec.description,
                      allow_rollup=True)


def site_stream(site: str) -> StreamSpec:
    return _spec("SITE_{site}", site=check_name(site, "site"))


FEDERATION_STREAM = _spec("FEDERATION")
EVIDENCE_STREAM = StreamSpec(name="EVIDENCE", subjects=_spec("EVIDENCE").subjects,
                             deny_delete=True, deny_purge=True,
                             description=_spec("EVIDENCE").description)
DEADLETTER_STREAM = _spec("DEADLETTER")
GLOBAL_STREAMS = (FEDERATION_STREAM, EVIDENCE_STREAM, DEADLETTER_STREAM)

KV_SITES = "sites"
KV_NONCES = "nonces"
KV_LEASES = "leases"
"""One key per leased service kind: who is active now (`cairn.bus.Lease`)."""
OBJ_EVIDENCE = "evidence"
OBJ_SNAPSHOTS = "snapshots"
"""Snapshots too large to ride inline in `site.snapshot` (and those a validation evaluated),
named by the sha256 of their JSON."""


def kv_launches(site: str) -> str:
    return f"launches_{check_name(site, 'site')}"


def obj_artifacts(study: str) -> str:
    return f"artifacts_{check_name(study, 'study')}"


def kv_stream(bucket: str) -> str:
    """The stream a KV bucket is stored in."""
    return f"KV_{bucket}"


def obj_stream(bucket: str) -> str:
    """The stream an object store is stored in."""
    return f"OBJ_{bucket}"


def is_storage_stream(name: str) -> bool:
    """KV, object-store and job-file streams are storage, not event streams."""
    return name.startswith(("KV_", "OBJ_", "FILES_"))
