"""Every subject, stream and bucket name, built by functions. Nothing else writes subjects.

Each token that comes from a user (study, site, job, role, recipe, service) passes the name
rule in `cairn.names` here, so a study called `s1.>` can never become a wildcard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from cairn.errors import InvalidName
from cairn.events import (
    BackendDeclared,
    CancelCommand,
    DeadLettered,
    DeployCommand,
    DeploymentAccepted,
    DeploymentRejected,
    Event,
    EvidenceRecorded,
    FederationSeeded,
    FederationSiteAdded,
    Heartbeat,
    JobAborted,
    JobCancelRequested,
    JobCompleted,
    JobDispatched,
    JobFailed,
    JobQueued,
    JobRunning,
    JobSubmitted,
    JobUnschedulable,
    LaunchCancel,
    LaunchRequested,
    RecordSkipped,
    SiteConfigLoaded,
    SiteConfigRejected,
    SnapshotDrift,
    SnapshotRecorded,
    StudyAdminAdded,
    StudyAdminRemoved,
    StudyCreated,
    StudySiteAdded,
    StudySiteRemoved,
    ValidationCompleted,
    ValidationPhase,
    ValidationStarted,
    WorkerExited,
    WorkerLaunching,
    WorkerMetric,
    WorkerProgress,
    WorkerResult,
    WorkerRunning,
    tag_of,
)
from cairn.names import check_name, is_name

ROOT = "cairn"
_VERB_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


def _verb(verb: str) -> str:
    if not verb or not set(verb) <= _VERB_CHARS:
        raise InvalidName(f"{verb!r} is not a valid subject verb", field="verb")
    return verb


# -- study stream ---------------------------------------------------------------------------

def study_admin(study: str, verb: str) -> str:
    return f"{ROOT}.study.{check_name(study, 'study')}.admin.{_verb(verb)}"


def job(study: str, job_id: str, verb: str) -> str:
    return (f"{ROOT}.study.{check_name(study, 'study')}.job.{check_name(job_id, 'job')}"
            f".{_verb(verb)}")


def job_site(study: str, job_id: str, site: str, verb: str) -> str:
    return (f"{ROOT}.study.{check_name(study, 'study')}.job.{check_name(job_id, 'job')}"
            f".site.{check_name(site, 'site')}.{_verb(verb)}")


def job_worker(study: str, job_id: str, site: str, role: str, verb: str) -> str:
    return (f"{ROOT}.study.{check_name(study, 'study')}.job.{check_name(job_id, 'job')}"
            f".worker.{check_name(site, 'site')}.{check_name(role, 'role')}.{_verb(verb)}")


def site_cmd(study: str, site: str, verb: str) -> str:
    return (f"{ROOT}.study.{check_name(study, 'study')}.site.{check_name(site, 'site')}"
            f".cmd.{_verb(verb)}")


def study_all(study: str) -> str:
    """Every stored subject of one study."""
    return f"{ROOT}.study.{check_name(study, 'study')}.>"


def study_jobs(study: str) -> str:
    return f"{ROOT}.study.{check_name(study, 'study')}.job.>"


def job_all(study: str, job_id: str) -> str:
    return f"{ROOT}.study.{check_name(study, 'study')}.job.{check_name(job_id, 'job')}.>"


def study_admin_all(study: str | None = None) -> str:
    """One study's admin events, or every study's (`None`)."""
    token = "*" if study is None else check_name(study, "study")
    return f"{ROOT}.study.{token}.admin.>"


def site_job_events(study: str, site: str, verb: str = "*") -> str:
    """One site's job events (accepted, rejected, launching, running, exited) in a study."""
    token = "*" if verb == "*" else _verb(verb)
    return (f"{ROOT}.study.{check_name(study, 'study')}.job.*.site.{check_name(site, 'site')}"
            f".{token}")


def site_cmds(study: str, site: str) -> str:
    return f"{ROOT}.study.{check_name(study, 'study')}.site.{check_name(site, 'site')}.cmd.>"


def site_cmds_all_studies(site: str) -> str:
    """A site agent's commands across every study it belongs to."""
    return f"{ROOT}.study.*.site.{check_name(site, 'site')}.cmd.>"


# -- data plane -----------------------------------------------------------------------------

def data(study: str, job_id: str, *tokens: str) -> str:
    """A job's data-plane subject: `cairn.data.<study>.<job>.<tokens...>`."""
    rest = ".".join(_data_token(t) for t in tokens)
    base = f"{ROOT}.data.{check_name(study, 'study')}.{check_name(job_id, 'job')}"
    return f"{base}.{rest}" if rest else base


def data_all(study: str, job_id: str | None = None) -> str:
    if job_id is None:
        return f"{ROOT}.data.{check_name(study, 'study')}.>"
    return f"{ROOT}.data.{check_name(study, 'study')}.{check_name(job_id, 'job')}.>"


def _data_token(token: str) -> str:
    if token in ("*", ">"):
        return token
    return check_name(token, "data subject token")


# -- site, federation, health, dead letters ---------------------------------------------------

def site_launch(site: str, verb: str) -> str:
    return f"{ROOT}.site.{check_name(site, 'site')}.launch.{_verb(verb)}"


def site_launch_all(site: str) -> str:
    return f"{ROOT}.site.{check_name(site, 'site')}.launch.>"


def heartbeat(site: str) -> str:
    return f"{ROOT}.site.{check_name(site, 'site')}.heartbeat"


def heartbeat_all() -> str:
    return f"{ROOT}.site.*.heartbeat"


def site_event(site: str, verb: str) -> str:
    """Site-level facts kept in FEDERATION: snapshot, drift, config."""
    return f"{ROOT}.site.{check_name(site, 'site')}.{_verb(verb)}"


def site_event_any(verb: str) -> str:
    """One kind of site fact (e.g. `snapshot`) of every site."""
    return f"{ROOT}.site.*.{_verb(verb)}"


def site_snapshot_request(site: str) -> str:
    """Request/reply: ask a site's snapshotter for a fresh snapshot (not stored)."""
    return f"{ROOT}.api.site.{check_name(site, 'site')}.snapshot"


def site_logs(site: str) -> str:
    """Request/reply: read a worker's captured log from the site's launcher (not stored)."""
    return f"{ROOT}.api.site.{check_name(site, 'site')}.logs"


def site_studies(site: str) -> str:
    """Request/reply: the studies a site belongs to, as the authority says (secure only)."""
    return f"{ROOT}.api.site.{check_name(site, 'site')}.studies"


def site_studies_all() -> str:
    return f"{ROOT}.api.site.*.studies"


def fed(verb: str) -> str:
    return f"{ROOT}.fed.{_verb(verb)}"


def validation(site: str, recipe: str, verb: str) -> str:
    return (f"{ROOT}.validation.{check_name(site, 'site')}.{check_name(recipe, 'recipe')}"
            f".{_verb(verb)}")


def validation_all(site: str, recipe: str) -> str:
    """Every validation event of one site and recipe (started, phase, completed)."""
    return f"{ROOT}.validation.{check_name(site, 'site')}.{check_name(recipe, 'recipe')}.*"


def validation_any() -> str:
    """Every validation event of every site and recipe."""
    return f"{ROOT}.validation.>"


def api_validation(verb: str) -> str:
    """Request/reply with the validator (`run`): not stored; progress comes as events."""
    return f"{ROOT}.api.validation.{_verb(verb)}"


def evidence(site: str, recipe: str) -> str:
    return f"{ROOT}.evidence.{check_name(site, 'site')}.{check_name(recipe, 'recipe')}"


def evidence_filter(site: str | None = None, recipe: str | None = None) -> str:
    """Evidence of one site and recipe, or of every site (`None`) or recipe (`None`)."""
    site_token = "*" if site is None else check_name(site, "site")
    recipe_token = "*" if recipe is None else check_name(recipe, "recipe")
    return f"{ROOT}.evidence.{site_token}.{recipe_token}"


def health(service: str, site: str) -> str:
    return f"{ROOT}.health.{check_name(service, 'service')}.{check_name(site, 'site')}"


def health_all() -> str:
    return f"{ROOT}.health.>"


def deadletter(stream: str) -> str:
    return f"{ROOT}.deadletter.{stream}"


def api_fed(verb: str) -> str:
    return f"{ROOT}.api.fed.{_verb(verb)}"


def api_fed_all() -> str:
    return f"{ROOT}.api.fed.*"


def api_study_all() -> str:
    """Every study verb of every study (the coordinator answers all of them)."""
    return f"{ROOT}.api.study.*.*"


def api_study(study: str, verb: str) -> str:
    return f"{ROOT}.api.study.{check_name(study, 'study')}.{_verb(verb)}"


class ApiAddress(NamedTuple):
    """Where a request on `cairn.api.*` was sent: its scope, verb and study or site token."""

    scope: str
    verb: str
    study: str | None = None
    site: str | None = None


def parse_api(subject: str) -> ApiAddress:
    """Parse `cairn.api.fed.<verb>`, `cairn.api.study.<study>.<verb>`,
    `cairn.api.site.<site>.<verb>` or `cairn.api.validation.<verb>`.

    Raises:
        InvalidName: not a request subject, or a token breaks the name rule.
    """
    tokens = subject.split(".")
    if len(tokens) >= 4 and tokens[:2] == [ROOT, "api"]:
        scope, rest = tokens[2], tokens[3:]
        if scope in ("fed", "validation") and len(rest) == 1:
            return ApiAddress(scope, _verb(rest[0]))
        if scope == "study" and len(rest) == 2:
            return ApiAddress(scope, _verb(rest[1]), study=check_name(rest[0], "study"))
        if scope == "site" and len(rest) == 2:
            return ApiAddress(scope, _verb(rest[1]), site=check_name(rest[0], "site"))
    raise InvalidName(f"{subject!r} is not a request subject", field="subject")


# -- streams and buckets --------------------------------------------------------------------

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
    extra: dict[str, object] = field(default_factory=dict)


STUDY_STREAM_PREFIX = "STUDY_"


def study_of_stream(name: str) -> str | None:
    """The study a `STUDY_<study>` stream belongs to; None for any other stream."""
    if not name.startswith(STUDY_STREAM_PREFIX):
        return None
    study = name[len(STUDY_STREAM_PREFIX):]
    return study if is_name(study) else None


def study_stream(study: str) -> StreamSpec:
    return StreamSpec(name=f"{STUDY_STREAM_PREFIX}{check_name(study, 'study')}",
                      subjects=(study_all(study),),
                      description=f"study {study}: admin, jobs, sites, workers")


def data_stream(study: str) -> StreamSpec:
    # The data plane is kept for audit with limited retention and never folded.
    return StreamSpec(name=f"DATA_{check_name(study, 'study')}", subjects=(data_all(study),),
                      max_age_s=24 * 3600.0, max_bytes=1 << 30,
                      description=f"study {study}: worker data plane")


def site_stream(site: str) -> StreamSpec:
    return StreamSpec(name=f"SITE_{check_name(site, 'site')}", subjects=(site_launch_all(site),),
                      description=f"site {site}: agent -> launcher commands")


FEDERATION_STREAM = StreamSpec(
    name="FEDERATION",
    subjects=(f"{ROOT}.fed.>", f"{ROOT}.site.*.snapshot", f"{ROOT}.site.*.drift",
              f"{ROOT}.site.*.config-loaded", f"{ROOT}.site.*.config-rejected",
              f"{ROOT}.site.*.backend", f"{ROOT}.site.*.record-skipped",
              f"{ROOT}.validation.>"),
    description="federation seed, site facts, snapshots, drift, validation",
)
EVIDENCE_STREAM = StreamSpec(name="EVIDENCE", subjects=(f"{ROOT}.evidence.>",), deny_delete=True,
                             deny_purge=True, description="signed evidence (append-only)")
DEADLETTER_STREAM = StreamSpec(name="DEADLETTER", subjects=(f"{ROOT}.deadletter.>",),
                               description="messages consumers could not handle")
GLOBAL_STREAMS = (FEDERATION_STREAM, EVIDENCE_STREAM, DEADLETTER_STREAM)

KV_SITES = "sites"
OBJ_EVIDENCE = "evidence"
OBJ_SNAPSHOTS = "snapshots"
"""Snapshots too large to ride inline in `site.snapshot` (and those a validation evaluated),
named by the sha256 of their JSON."""


def kv_launches(site: str) -> str:
    return f"launches_{check_name(site, 'site')}"


def obj_artifacts(study: str) -> str:
    return f"artifacts_{check_name(study, 'study')}"


def is_storage_stream(name: str) -> bool:
    """KV and object-store streams are storage, not event streams."""
    return name.startswith(("KV_", "OBJ_"))


# -- the subject of an event ----------------------------------------------------------------

def _last(event: Event) -> str:
    return tag_of(event).rsplit(".", 1)[1]


def subject_of(event: Event) -> str:
    """The one subject an event is published on."""
    study = event.study or ""
    match event:
        case StudyCreated() | StudySiteAdded() | StudySiteRemoved() | StudyAdminAdded() | \
                StudyAdminRemoved():
            return study_admin(study, _last(event))
        case JobSubmitted() | JobQueued() | JobDispatched() | JobRunning() | \
                JobCancelRequested() | JobCompleted() | JobFailed() | JobAborted() | \
                JobUnschedulable():
            return job(study, event.job, _last(event))
        case DeployCommand() | CancelCommand():
            return site_cmd(study, event.site, _last(event))
        case DeploymentAccepted() | DeploymentRejected() | WorkerLaunching() | \
                WorkerRunning() | WorkerExited():
            return job_site(study, event.job, event.site, _last(event))
        case WorkerProgress() | WorkerMetric() | WorkerResult():
            return job_worker(study, event.job, event.site, event.role, _last(event))
        case LaunchRequested() | LaunchCancel():
            return site_launch(event.site, _last(event))
        case Heartbeat():
            return heartbeat(event.site)
        case SnapshotRecorded() | SnapshotDrift() | SiteConfigLoaded() | SiteConfigRejected() | \
                BackendDeclared() | RecordSkipped():
            return site_event(event.site, _last(event))
        case ValidationStarted() | ValidationPhase() | ValidationCompleted():
            return validation(event.site, event.recipe, _last(event))
        case FederationSeeded() | FederationSiteAdded():
            return fed(_last(event))
        case DeadLettered():
            return deadletter(event.stream)
        case EvidenceRecorded():
            return evidence(event.site, event.recipe)
    raise InvalidName(f"no subject for event type {tag_of(event)!r}", field="type")


# -- templates: a subject with its names as placeholders -----------------------------------

# `{x}`: a name (study, job, site, ...); `$`: a verb, kept when it is one Cairn uses, else
# `{verb}` (a subject a stranger made up must not name a span); `>`: the rest, if any (the data
# plane's own tokens). Read from the builders above.
_TEMPLATES = tuple(t.split(".") for t in (
    "cairn.study.{study}.admin.$", "cairn.study.{study}.job.{job}.$",
    "cairn.study.{study}.job.{job}.site.{site}.$",
    "cairn.study.{study}.job.{job}.worker.{site}.{role}.$",
    "cairn.study.{study}.site.{site}.cmd.$", "cairn.data.{study}.{job}.>",
    "cairn.site.{site}.launch.$", "cairn.site.{site}.$", "cairn.api.fed.$",
    "cairn.api.study.{study}.$", "cairn.api.site.{site}.$", "cairn.api.validation.$",
    "cairn.fed.$", "cairn.validation.{site}.{recipe}.$", "cairn.evidence.{site}.{recipe}",
    "cairn.health.{service}.{site}", "cairn.deadletter.{stream}",
))
_known_verbs: frozenset[str] | None = None


def _verbs() -> frozenset[str]:
    """Every verb a Cairn subject ends in: event tags' last parts and request verbs."""
    global _known_verbs
    if _known_verbs is None:
        from typing import get_args

        from cairn.api.requests import Request
        from cairn.events import event_types

        _known_verbs = frozenset({tag_of(t).rsplit(".", 1)[-1] for t in event_types()}
                                 | {str(t.__struct_config__.tag) for t in get_args(Request)}
                                 | {"studies", "logs", "snapshot"})  # site requests above
    return _known_verbs


def template(subject: str) -> str | None:
    """The subject with its names replaced by placeholders, e.g.
    `cairn.study.{study}.job.{job}.submitted`: what stays the same from one job, site or study
    to the next (a span's name, a metric's label); None for a subject that is not Cairn's."""
    tokens = subject.split(".")
    for pattern in _TEMPLATES:
        rest = pattern[-1] == ">"
        if len(tokens) < len(pattern) - 1 if rest else len(tokens) != len(pattern):
            continue
        out = []
        for want, got in zip(pattern, tokens, strict=False):
            if want == "$":
                out.append(got if got in _verbs() else "{verb}")
            elif want.startswith("{") or want == ">":
                out.append(want)
            elif want != got:
                break
            else:
                out.append(got)
        else:
            return ".".join(out)
    return None
