"""The subject table: every subject, stream, bucket and consumer Cairn uses, as data.

Each row says what may be written where and by whom, and who may read it. Three things are
derived from these rows and nothing else: the subject builders (`cairn.subjects`), the
broker permissions of every identity (`cairn.trust.permissions`), and the owner check every
service applies before it folds an event (`cairn.subjects.misplaced`). `docs/security.md`
prints the same rows (`tools/security_table.py`). Two hand-written halves drift, and the drift
is where holes are: so there is only this half.

A pattern's `{placeholders}` are subject tokens. An `Access` names a role and, per
placeholder, how the token is bound for a holder of that role (`Scope`): `OWN` (its own
site, job, role or study), `MEMBER` (a study it belongs to, or a site of one), or `ANY`
(a wildcard; the default for a placeholder an access does not name).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from cairn.events import (
    BackendDeclared,
    CancelCommand,
    DeadLettered,
    DeployCommand,
    DeploymentAccepted,
    DeploymentRejected,
    EvidenceRecorded,
    FederationSeeded,
    FederationSiteAdded,
    FederationTerm,
    Heartbeat,
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
    StudyHold,
    StudySiteAdded,
    StudySiteRemoved,
    StudyTerm,
    ValidationCompleted,
    ValidationPhase,
    ValidationStarted,
    ValidationTerm,
    WorkerExited,
    WorkerLaunching,
    WorkerMetric,
    WorkerProgress,
    WorkerResult,
    WorkerRunning,
)
from cairn.events.base import Event

ROOT = "cairn"
JS_API = "$JS.API"


class Role(StrEnum):
    """Who does what. A provisioned identity holds one or more roles (`roles_of`)."""

    COORDINATOR = "coordinator"
    VALIDATOR = "validator"
    SIGNER = "signer"
    AGENT = "agent"
    LAUNCHER = "launcher"
    SNAPSHOTTER = "snapshotter"
    WORKER = "worker"
    ADMIN = "admin"
    """An admin of the studies it belongs to (lead, member, org admin)."""
    PROJECT_ADMIN = "project-admin"
    """An admin of every study, present and future."""
    READER = "reader"
    """An outside system reading one study's events (`cairn provision reader`)."""
    DATA_READER = "data-reader"
    """A reader also allowed the study's data plane and job files (`--data`)."""
    API = "api"
    """The HTTP API service (`cairn.httpapi`): reads every study and the federation's facts
    to answer each caller with what that caller may read, and passes on the callers' own
    signed submit and cancel requests. It writes no event and signs no request."""


class Scope(StrEnum):
    ANY = "any"
    OWN = "own"
    MEMBER = "member"


@dataclass(frozen=True)
class Access:
    """One role's right to a row, with how the row's placeholders bind for it."""

    role: Role
    scope: tuple[tuple[str, Scope], ...] = ()

    def bound(self, placeholder: str) -> Scope:
        return dict(self.scope).get(placeholder, Scope.ANY)


def by(who: Role, /, **scope: Scope) -> Access:
    return Access(who, tuple(sorted(scope.items())))


def _own(who: Role, *placeholders: str, member_study: bool = True) -> Access:
    """`who` bound to its own tokens, in the studies it belongs to."""
    scope = {p: Scope.OWN for p in placeholders}
    if member_study and "study" not in scope:
        scope["study"] = Scope.MEMBER
    return by(who, **scope)


SERVICES = (Role.COORDINATOR, Role.VALIDATOR, Role.SIGNER)
"""The federation's own services (the hub identity), trusted with every study."""

Kind = Literal["event", "request", "core", "store"]


@dataclass(frozen=True)
class Subject:
    """One subject pattern: who may write it, who may read it live, what it carries.

    Attributes:
        key: A short name for the row (docs, tests).
        pattern: The subject, `{placeholder}` per variable token; `{verb}` is one of `verbs`.
        kind: `event` (stored in `stream`), `request` (request/reply: writers ask, readers
            answer), `core` (not stored: live readers only), `store` (a KV or object-store
            write, into `stream`).
        writers: Who may publish on it.
        readers: Who may subscribe to it live (for stored subjects, reading the stream is
            granted by the stream's row).
        stream: The stream it is stored in (a template), if any.
        events: The event types written here; the owner check refuses any other.
        verbs: The values `{verb}` may take; empty means any verb (`*`).
    """

    key: str
    pattern: str
    kind: Kind
    writers: tuple[Access, ...]
    readers: tuple[Access, ...] = ()
    stream: str | None = None
    events: tuple[type[Event], ...] = ()
    verbs: tuple[str, ...] = ()
    doc: str = ""

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(_PLACEHOLDER.findall(self.pattern))


@dataclass(frozen=True)
class Read:
    """A right to read part of a stream: live (subscribe) and stored (consumers, get)."""

    access: Access
    filter: str | None = None
    """A subject pattern inside the stream; None: the whole stream."""


@dataclass(frozen=True)
class Stream:
    """A JetStream stream (events, or a KV bucket's or object store's storage)."""

    name: str
    subjects: tuple[str, ...]
    store: Literal["events", "kv", "object", "files"]
    reads: tuple[Read, ...]
    doc: str = ""


@dataclass(frozen=True)
class Consumer:
    """A durable consumer name that belongs to one role (ephemeral ones: `owned_names`)."""

    stream: str
    name: str
    owner: Access
    doc: str = ""


_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def _verbs(*events: type[Event]) -> tuple[str, ...]:
    return tuple(str(e.__struct_config__.tag).rsplit(".", 1)[1] for e in events)


def _row(key: str, pattern: str, kind: Kind, writers: tuple[Access, ...], *,
         readers: tuple[Access, ...] = (), stream: str | None = None,
         events: tuple[type[Event], ...] = (), verbs: tuple[str, ...] | None = None,
         doc: str = "") -> Subject:
    return Subject(key=key, pattern=pattern, kind=kind, writers=writers, readers=readers,
                   stream=stream, events=events,
                   verbs=verbs if verbs is not None else _verbs(*events), doc=doc)


_COORD = (by(Role.COORDINATOR),)
STUDY = "STUDY_{study}"
DATA = "DATA_{study}"
FILES = "FILES_{study}"
SITE = "SITE_{site}"
FEDERATION = "FEDERATION"
EVIDENCE = "EVIDENCE"
DEADLETTER = "DEADLETTER"

_STUDY_ADMIN_EVENTS = (StudyCreated, StudySiteAdded, StudySiteRemoved, StudyAdminAdded,
                       StudyAdminRemoved, StudyHold, StudyTerm)
_JOB_EVENTS = (JobSubmitted, JobQueued, JobDispatched, JobRunning, JobEnding,
               JobCancelRequested, JobCompleted, JobFailed, JobAborted, JobUnschedulable)
_AGENT_JOB_EVENTS = (DeploymentAccepted, DeploymentRejected)
_LAUNCHER_JOB_EVENTS = (WorkerLaunching, WorkerRunning, WorkerExited)
_WORKER_EVENTS = (WorkerProgress, WorkerMetric, WorkerResult)
_ADMINS = (by(Role.ADMIN, study=Scope.MEMBER), by(Role.PROJECT_ADMIN))
_SITE_ADMINS = (by(Role.ADMIN, site=Scope.MEMBER), by(Role.PROJECT_ADMIN))

_HEALTH_ASKERS = (by(Role.ADMIN), by(Role.PROJECT_ADMIN), by(Role.COORDINATOR),
                  _own(Role.AGENT, "site", member_study=False))

SUBJECTS: tuple[Subject, ...] = (
    # -- a study's stream -----------------------------------------------------------------
    _row("study.admin", f"{ROOT}.study.{{study}}.admin.{{verb}}", "event", _COORD,
         stream=STUDY, events=_STUDY_ADMIN_EVENTS,
         doc="membership: the study, its sites and admins"),
    _row("study.job", f"{ROOT}.study.{{study}}.job.{{job}}.{{verb}}", "event", _COORD,
         stream=STUDY, events=_JOB_EVENTS, doc="a job's state machine"),
    _row("study.job.site", f"{ROOT}.study.{{study}}.job.{{job}}.site.{{site}}.{{verb}}",
         "event", (_own(Role.AGENT, "site"), _own(Role.LAUNCHER, "site")), stream=STUDY,
         events=_AGENT_JOB_EVENTS + _LAUNCHER_JOB_EVENTS,
         doc="a site's decisions (agent) and its workers' lives (launcher)"),
    _row("study.job.worker",
         f"{ROOT}.study.{{study}}.job.{{job}}.worker.{{site}}.{{role}}.{{verb}}", "event",
         (_own(Role.WORKER, "study", "job", "site", "role"),), stream=STUDY,
         events=_WORKER_EVENTS, doc="what a worker reports: progress, metrics, result"),
    _row("study.site.cmd", f"{ROOT}.study.{{study}}.site.{{site}}.cmd.{{verb}}", "event",
         _COORD, stream=STUDY, events=(DeployCommand, CancelCommand),
         doc="the coordinator's commands to one site's agent"),
    # -- a study's data plane and job files -----------------------------------------------
    _row("data", f"{ROOT}.data.{{study}}.{{job}}.>", "event",
         (_own(Role.WORKER, "study", "job"),), stream=DATA,
         doc="a job's workers talking to each other (rounds, payload references)"),
    _row("files", f"{ROOT}.files.{{study}}.{{job}}.>", "store",
         (_own(Role.WORKER, "study", "job"),), stream=FILES,
         doc="a job's files: worker results and data-plane payloads over the inline limit"),
    # -- one site ---------------------------------------------------------------------------
    _row("site.launch", f"{ROOT}.site.{{site}}.launch.{{verb}}", "event",
         (_own(Role.AGENT, "site", member_study=False),), stream=SITE,
         events=(LaunchRequested, LaunchCancel), doc="agent -> launcher of the same site"),
    _row("site.heartbeat", f"{ROOT}.site.{{site}}.heartbeat", "core",
         (_own(Role.AGENT, "site", member_study=False),),
         readers=(by(Role.COORDINATOR),), events=(Heartbeat,),
         doc="liveness and free capacity (latest kept in KV sites)"),
    _row("site.snapshot", f"{ROOT}.site.{{site}}.{{verb}}", "event",
         (_own(Role.SNAPSHOTTER, "site", member_study=False),), stream=FEDERATION,
         events=(SnapshotRecorded, SnapshotDrift), doc="what the site is, and drift"),
    _row("site.config", f"{ROOT}.site.{{site}}.{{verb}}", "event",
         (_own(Role.AGENT, "site", member_study=False),), stream=FEDERATION,
         events=(SiteConfigLoaded, SiteConfigRejected),
         doc="the site's study_runtime.yaml, loaded or refused"),
    _row("site.backend", f"{ROOT}.site.{{site}}.{{verb}}", "event",
         (_own(Role.LAUNCHER, "site", member_study=False),), stream=FEDERATION,
         events=(BackendDeclared, RecordSkipped),
         doc="the launcher's backend and capabilities; launch records it skipped"),
    # -- the federation ---------------------------------------------------------------------
    _row("fed", f"{ROOT}.fed.{{verb}}", "event", _COORD, stream=FEDERATION,
         events=(FederationSeeded, FederationSiteAdded, FederationTerm),
         doc="the federation's sites; the coordinator's terms"),
    _row("validation", f"{ROOT}.validation.{{site}}.{{recipe}}.{{verb}}", "event",
         (by(Role.VALIDATOR),), stream=FEDERATION,
         events=(ValidationStarted, ValidationPhase, ValidationCompleted),
         doc="validation runs of a recipe at a site"),
    _row("validation.term", f"{ROOT}.validation.term", "event", (by(Role.VALIDATOR),),
         stream=FEDERATION, events=(ValidationTerm,), verbs=(),
         doc="the validator's terms (its fence)"),
    _row("evidence", f"{ROOT}.evidence.{{site}}.{{recipe}}", "event", (by(Role.SIGNER),),
         stream=EVIDENCE, events=(EvidenceRecorded,), verbs=(),
         doc="signed evidence (append-only)"),
    _row("deadletter", f"{ROOT}.deadletter.{{stream}}", "event",
         (*(by(r) for r in SERVICES), by(Role.AGENT, stream=Scope.MEMBER),
          by(Role.LAUNCHER, stream=Scope.MEMBER), by(Role.SNAPSHOTTER, stream=Scope.MEMBER)),
         stream=DEADLETTER, events=(DeadLettered,), verbs=(),
         doc="what a consumer could not handle (a site: only of the streams it reads)"),
    # -- requests (not stored) --------------------------------------------------------------
    _row("api.fed", f"{ROOT}.api.fed.{{verb}}", "request",
         (by(Role.ADMIN), by(Role.PROJECT_ADMIN)), readers=_COORD, verbs=(),
         doc="federation-wide verbs (study list, federation info)"),
    _row("api.study", f"{ROOT}.api.study.{{study}}.{{verb}}", "request",
         (*_ADMINS, by(Role.VALIDATOR)), readers=_COORD, verbs=(),
         doc="a study's verbs (submit, cancel, show, membership), signed"),
    _row("api.study.http", f"{ROOT}.api.study.{{study}}.{{verb}}", "request",
         (by(Role.API),), verbs=("submit", "cancel"),
         doc="the HTTP API passing on a caller's own signed submit or cancel (the "
             "coordinator checks the caller's signature; the API's own would be refused)"),
    _row("api.check-jobs", f"{ROOT}.api.study.validation.{{verb}}", "request",
         (by(Role.SNAPSHOTTER),), readers=_COORD, verbs=("submit", "job", "jobs"),
         doc="a site's node-collection jobs onto itself (checked again by the coordinator)"),
    _row("api.site.logs", f"{ROOT}.api.site.{{site}}.logs", "request",
         (*_SITE_ADMINS, by(Role.VALIDATOR),
          _own(Role.SNAPSHOTTER, "site", member_study=False)),
         readers=(_own(Role.LAUNCHER, "site", member_study=False),), verbs=(),
         doc="a worker's log, from its site's launcher (the validator and the site's own "
             "snapshotter read their check and collection jobs')"),
    _row("api.site.snapshot", f"{ROOT}.api.site.{{site}}.snapshot", "request",
         (*_SITE_ADMINS, by(Role.VALIDATOR)),
         readers=(_own(Role.SNAPSHOTTER, "site", member_study=False),), verbs=(),
         doc="ask a site's snapshotter for a fresh snapshot"),
    _row("api.site.studies", f"{ROOT}.api.site.{{site}}.studies", "request",
         (_own(Role.AGENT, "site", member_study=False),), verbs=(),
         doc="a site asks the authority which studies it is in"),
    _row("api.validation", f"{ROOT}.api.validation.{{verb}}", "request",
         (by(Role.PROJECT_ADMIN),), readers=(by(Role.VALIDATOR),), verbs=(),
         doc="start a validation run"),
    _row("health", f"{ROOT}.health.{{service}}.{{site}}", "request", _HEALTH_ASKERS,
         readers=(by(Role.COORDINATOR), _own(Role.AGENT, "site", member_study=False)),
         verbs=(), doc="every service answers a ping (a site: only its own services)"),
    _row("health.httpapi", f"{ROOT}.health.httpapi.{{site}}", "request", _HEALTH_ASKERS,
         readers=(by(Role.API),), verbs=(), doc="the HTTP API answers its own ping"),
    _row("js.stream-names", f"{JS_API}.STREAM.NAMES", "request",
         (*(by(r) for r in SERVICES), by(Role.API)), verbs=(),
         doc="the names of the streams: how the HTTP API finds a study made since it "
             "started"),
    # -- KV and object-store writes ---------------------------------------------------------
    _row("kv.sites", "$KV.sites.{site}", "store",
         (_own(Role.AGENT, "site", member_study=False),), stream="KV_sites", verbs=(),
         doc="latest heartbeat per site"),
    _row("kv.launches", "$KV.launches_{site}.>", "store",
         (_own(Role.LAUNCHER, "site", member_study=False),), stream="KV_launches_{site}",
         verbs=(), doc="the launcher's durable launch records (reconcile after restart)"),
    _row("kv.nonces", "$KV.nonces.>", "store", _COORD, stream="KV_nonces", verbs=(),
         doc="used request nonces, until the request would have expired"),
    *(_row(f"kv.lease.{r}", f"$KV.leases.{r}", "store", (by(r),), stream="KV_leases",
           verbs=(), doc=f"the {r}'s lease: which of its instances is active (standby)")
      for r in SERVICES),
    _row("obj.artifacts", "$O.artifacts_{study}.>", "store",
         (*_ADMINS, by(Role.COORDINATOR), by(Role.API)), stream="OBJ_artifacts_{study}",
         verbs=(), doc="job code bundles, by sha256 (the HTTP API stores one only for a "
                       "caller's signed submit naming its digest)"),
    _row("obj.snapshots", "$O.snapshots.>", "store",
         (by(Role.SNAPSHOTTER), by(Role.VALIDATOR)), stream="OBJ_snapshots", verbs=(),
         doc="snapshots too large to ride inline, by sha256"),
    _row("obj.evidence", "$O.evidence.>", "store", (by(Role.SIGNER),),
         stream="OBJ_evidence", verbs=(), doc="evidence bundles, by sha256"),
)

_STUDY_READERS = (_own(Role.AGENT, member_study=True), _own(Role.LAUNCHER, member_study=True),
                  *_ADMINS, by(Role.READER, study=Scope.OWN),
                  by(Role.DATA_READER, study=Scope.OWN))
_DATA_READERS = (*_ADMINS, by(Role.DATA_READER, study=Scope.OWN))


def _hub_reads() -> tuple[Read, ...]:
    return tuple(Read(by(r)) for r in SERVICES)


_API_READ = Read(by(Role.API))
"""The HTTP API's read of a whole stream: it narrows each answer to its caller's rights."""


STREAMS: tuple[Stream, ...] = (
    Stream(STUDY, (f"{ROOT}.study.{{study}}.>",), "events",
           (*_hub_reads(), *(Read(a) for a in _STUDY_READERS), _API_READ,
            Read(_own(Role.WORKER, "study", "job"), f"{ROOT}.study.{{study}}.job.{{job}}.>")),
           doc="a study: admin, jobs, sites, workers"),
    Stream(DATA, (f"{ROOT}.data.{{study}}.>",), "events",
           (*_hub_reads(), *(Read(a) for a in _DATA_READERS),
            Read(_own(Role.WORKER, "study", "job"), f"{ROOT}.data.{{study}}.{{job}}.>")),
           doc="a study's data plane (limited retention, never folded)"),
    Stream(FILES, (f"{ROOT}.files.{{study}}.>",), "files",
           (*_hub_reads(), *(Read(a) for a in _DATA_READERS),
            Read(_own(Role.WORKER, "study", "job"), f"{ROOT}.files.{{study}}.{{job}}.>")),
           doc="a study's job files: results and large payloads, per job"),
    Stream(SITE, (f"{ROOT}.site.{{site}}.launch.>",), "events",
           (*_hub_reads(), Read(_own(Role.LAUNCHER, "site", member_study=False))),
           doc="a site's agent -> launcher commands"),
    Stream(FEDERATION, (f"{ROOT}.fed.>", f"{ROOT}.site.*.snapshot", f"{ROOT}.site.*.drift",
                        f"{ROOT}.site.*.config-loaded", f"{ROOT}.site.*.config-rejected",
                        f"{ROOT}.site.*.backend", f"{ROOT}.site.*.record-skipped",
                        f"{ROOT}.validation.>"), "events",
           (*_hub_reads(), Read(by(Role.ADMIN)), Read(by(Role.PROJECT_ADMIN)), _API_READ,
            *(Read(_own(r, "site", member_study=False), f"{ROOT}.site.{{site}}.*")
              for r in (Role.AGENT, Role.LAUNCHER, Role.SNAPSHOTTER)),
            # Who the federation's sites and admins are (the snapshotter names an admin).
            Read(by(Role.SNAPSHOTTER), f"{ROOT}.fed.>")),
           doc="federation seed, site facts, snapshots, drift, validation"),
    Stream(EVIDENCE, (f"{ROOT}.evidence.>",), "events",
           (*_hub_reads(), Read(by(Role.ADMIN)), Read(by(Role.PROJECT_ADMIN)), _API_READ),
           doc="signed evidence (deny delete, deny purge)"),
    Stream(DEADLETTER, (f"{ROOT}.deadletter.>",), "events",
           (*_hub_reads(), Read(by(Role.PROJECT_ADMIN))),
           doc="messages consumers could not handle"),
    Stream("KV_sites", ("$KV.sites.>",), "kv",
           (*_hub_reads(), Read(by(Role.ADMIN)), Read(by(Role.PROJECT_ADMIN))),
           doc="latest heartbeat per site"),
    Stream("KV_launches_{site}", ("$KV.launches_{site}.>",), "kv",
           (*_hub_reads(), Read(_own(Role.LAUNCHER, "site", member_study=False))),
           doc="one site's launch records"),
    Stream("KV_nonces", ("$KV.nonces.>",), "kv", (Read(by(Role.COORDINATOR)),),
           doc="used request nonces"),
    Stream("KV_leases", ("$KV.leases.>",), "kv", _hub_reads(),
           doc="which instance of each federation service is active"),
    Stream("OBJ_artifacts_{study}", ("$O.artifacts_{study}.C.>", "$O.artifacts_{study}.M.>"),
           "object", (*_hub_reads(), Read(_own(Role.LAUNCHER, member_study=True)),
                      *(Read(a) for a in _ADMINS)),
           doc="a study's job code bundles"),
    Stream("OBJ_snapshots", ("$O.snapshots.C.>", "$O.snapshots.M.>"), "object",
           (*_hub_reads(), Read(by(Role.ADMIN)), Read(by(Role.PROJECT_ADMIN)), _API_READ),
           doc="large snapshots"),
    Stream("OBJ_evidence", ("$O.evidence.C.>", "$O.evidence.M.>"), "object",
           (*_hub_reads(), Read(by(Role.ADMIN)), Read(by(Role.PROJECT_ADMIN)), _API_READ),
           doc="evidence bundles"),
)

CONSUMERS: tuple[Consumer, ...] = (
    Consumer(STUDY, "coordinator", by(Role.COORDINATOR), "folds and decides every study"),
    Consumer(STUDY, "agent-{site}", _own(Role.AGENT, "site"),
             "a site's commands and its workers' exits"),
    Consumer(STUDY, "launcher-{site}", _own(Role.LAUNCHER, "site"),
             "the launcher's index of its site's deploy commands (and admins, rejections)"),
    Consumer(SITE, "launcher", _own(Role.LAUNCHER, "site", member_study=False),
             "the site's launch commands"),
    Consumer(FEDERATION, "coordinator-fed", by(Role.COORDINATOR), "the federation's sites"),
    Consumer(FEDERATION, "coordinator-snapshots", by(Role.COORDINATOR),
             "snapshots, for eligibility"),
    Consumer(FEDERATION, "signer", by(Role.SIGNER), "finished validation runs"),
    Consumer(EVIDENCE, "coordinator-evidence", by(Role.COORDINATOR),
             "evidence, for eligibility"),
)

EPHEMERAL_SLOTS = 8
"""Ephemeral consumers (replays, reads) one connection's identity may hold on one stream at
once: their names are the identity's own (`owned_names`), so nobody else can create, pull
from or delete them."""
WORKER_SLOTS = 4


@dataclass(frozen=True)
class StaticUser:
    """One of the authority's static users in nats.conf (never an issued identity)."""

    name: str
    pub: tuple[str, ...]
    sub: tuple[str, ...]
    doc: str = ""


AUTHORITY_READER = StaticUser(
    "reader", pub=(f"{JS_API}.>", "$JS.ACK.>", "$KV.>", "_INBOX.>"),
    sub=(f"{ROOT}.study.>", f"{ROOT}.api.site.*.studies", "_INBOX.>"),
    doc="follows membership and job ends, makes streams, keeps the connection records")


# -- identities: their roles, and the tokens their scopes bind to --------------------------

@dataclass(frozen=True)
class Holder:
    """What an identity's scopes bind to, now (pure data: no credentials, no I/O).

    Attributes:
        kind: The identity kind (`hub`, `site`, `admin`, `worker`, `reader`, `api`).
        roles: The roles it holds.
        site: Its own site (hub, site, worker).
        studies: The studies it belongs to now; None means every study.
        study: Its own study (worker, reader).
        job: Its own job (worker).
        role: Its own role in its job (worker).
        member_sites: Sites of its studies (admins: the sites it may ask for logs); None
            means every site.
        owner: The token its consumer names start with (`owned_names`).
    """

    kind: str
    roles: frozenset[Role]
    site: str = ""
    studies: tuple[str, ...] | None = ()
    study: str = ""
    job: str = ""
    role: str = ""
    member_sites: tuple[str, ...] | None = ()
    owner: str = ""
    slots: int = EPHEMERAL_SLOTS
    known_studies: tuple[str, ...] = ()
    """Every study there is now: where a study is part of a name (`OBJ_artifacts_<study>`),
    "every study" cannot be a NATS wildcard, so it is each of these."""
    known_sites: tuple[str, ...] = ()


def consumer_owner(kind: str, name: str, site: str = "") -> str:
    """The token an identity's ephemeral consumer names start with.

    Sites use their own name; others a short hash of theirs behind a kind mark that no site
    name can have (`~`), so no two identities ever share a name.
    """
    if kind in ("site", "hub"):
        return site or name
    mark = {"admin": "a", "worker": "w", "reader": "r", "api": "h"}.get(kind, "x")
    return f"{mark}~{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def owned_names(owner: str, slots: int) -> tuple[str, ...]:
    """An identity's ephemeral consumer names (`_` never occurs in a durable's name)."""
    return tuple(f"{owner}_{i}" for i in range(slots))


def rows_for_stream(stream: str) -> tuple[Subject, ...]:
    return tuple(r for r in SUBJECTS if r.stream == stream)


def subject_row(key: str) -> Subject:
    for row in SUBJECTS:
        if row.key == key:
            return row
    raise KeyError(key)


def stream_row(name: str) -> Stream:
    for row in STREAMS:
        if row.name == name:
            return row
    raise KeyError(name)


def rows_of_event(event_type: type[Event]) -> tuple[Subject, ...]:
    """The rows an event type may be written on (exactly one for every event)."""
    return tuple(r for r in SUBJECTS if event_type in r.events)


# -- filling a pattern ------------------------------------------------------------------------

_VERB = re.compile(r"^[a-z0-9-]+$")
_STREAM_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def fill(pattern: str, *, wildcards: bool = False, **tokens: str) -> str:
    """`pattern` with each `{placeholder}` replaced by its token (see `fill_with`)."""
    return fill_with(pattern, tokens, wildcards=wildcards)


def fill_with(pattern: str, tokens: Mapping[str, str], *, wildcards: bool = False) -> str:
    """`pattern` with each `{placeholder}` replaced by its token, checked by the name rule.

    With `wildcards`, a missing token becomes `*` and a token may itself be `*`: a filter,
    not a subject to publish on.

    Raises:
        InvalidName: a token breaks the rule for its kind (names, verbs, stream names).
    """
    from cairn.errors import InvalidName
    from cairn.names import check_name

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        value = tokens.get(name)
        if value is None or (wildcards and value == "*"):
            if wildcards:
                return "*"
            raise InvalidName(f"no {name} for subject {pattern}", field=name)
        if name == "verb":
            if not _VERB.fullmatch(value):
                raise InvalidName(f"{value!r} is not a valid subject verb", field="verb")
            return value
        if name == "stream":
            if not _STREAM_NAME.fullmatch(value):
                raise InvalidName(f"{value!r} is not a stream name", field="stream")
            return value
        return check_name(value, name)

    return _PLACEHOLDER.sub(one, pattern)


# -- JetStream's API, spelled once ----------------------------------------------------------

def js_api(*tokens: str) -> str:
    """`$JS.API.<tokens...>`: every JetStream API subject Cairn uses or grants."""
    return ".".join((JS_API, *tokens))


def reply_inbox(inbox: str, subject: str, token: str) -> str:
    """The inbox a request on `subject` is answered on: the asker's own inbox (`inbox`, e.g.
    `_INBOX.<key>`), the subject asked, and a token of this request.

    Who may answer `subject` may publish on `reply_inboxes(subject)`: a replier behind a leaf
    node cannot use the server's one-time response permission (it does not cross a leaf
    link), and this names no inbox but those of requests made on a subject it answers."""
    return f"{inbox}.{subject}.{token}"


def reply_inboxes(subject: str) -> str:
    """Every asker's inbox for requests on `subject` (a subject pattern): `reply_inbox`."""
    return f"_INBOX.*.{subject}.*"


JS_DOMAIN = "cairn"
"""The federation's JetStream domain: how a client on a site's leaf node names the
federation's JetStream (`$JS.cairn.API.>`) rather than its own server's."""


def js_domain_api(subject: str) -> str:
    """`$JS.API.<rest>` as a client on a leaf node sends it: `$JS.cairn.API.<rest>`; a
    bucket write `$KV.<rest>` goes as `$JS.cairn.API.$KV.<rest>`."""
    if subject.startswith("$KV."):
        return f"$JS.{JS_DOMAIN}.API.{subject}"
    assert subject.startswith(JS_API + ".")
    return f"$JS.{JS_DOMAIN}.API" + subject.removeprefix(JS_API)


def js_consumer_create(stream: str, name: str, filter_subject: str | None = None) -> str:
    """The named consumer-create form; a single filter travels in the subject."""
    base = js_api("CONSUMER", "CREATE", stream, name)
    return f"{base}.{filter_subject}" if filter_subject else base


def js_consumer(verb: str, stream: str, name: str) -> str:
    """`MSG.NEXT`, `INFO`, `DELETE` (and `DURABLE.CREATE`) of one named consumer."""
    return js_api("CONSUMER", *verb.split("."), stream, name)


def js_ack(stream: str, name: str) -> str:
    return f"$JS.ACK.{stream}.{name}.>"


def js_stream(verb: str, stream: str, subject: str | None = None) -> str:
    """`STREAM.INFO`, `STREAM.MSG.GET`, `DIRECT.GET` (last by `subject`) of one stream."""
    base = js_api(*verb.split("."), stream)
    return f"{base}.{subject}" if subject else base


# -- KV and object-store subjects, and the system account's -----------------------------------

def kv_subject(bucket: str, key: str = ">") -> str:
    """A KV bucket's key subject (`$KV.<bucket>.<key>`), or all of them."""
    return f"$KV.{bucket}.{key}"


def obj_meta_subject(bucket: str, name_token: str = ">") -> str:
    """An object store's meta record subject (the name base64url-encoded by the caller)."""
    return f"$O.{bucket}.M.{name_token}"


def obj_chunk_subject(bucket: str, nuid: str = ">") -> str:
    return f"$O.{bucket}.C.{nuid}"


SYS_AUTH_CALLOUT = "$SYS.REQ.USER.AUTH"
"""Where the server asks the authority to decide a connection."""
SYS_CONNZ = "$SYS.REQ.SERVER.PING.CONNZ"
"""Every server's connections (the authority re-learns them at start)."""


def sys_disconnects(account: str) -> str:
    return f"$SYS.ACCOUNT.{account}.DISCONNECT"


def sys_kick(server_id: str) -> str:
    return f"$SYS.REQ.SERVER.{server_id}.KICK"
