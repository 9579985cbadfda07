"""Federation-wide facts: the seed, site configuration, snapshots, drift, validation.

Subjects: `cairn.fed.<verb>`, `cairn.site.<site>.<verb>` and
`cairn.validation.<site>.<recipe>.<verb>`, all in the FEDERATION stream.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from cairn.events.base import Event
from cairn.events.job import Resources
from cairn.events.study import StudyAdmin


class FederationSite(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    org: str


class FederationSeeded(Event, tag="federation.seeded", frozen=True, kw_only=True):
    """The coordinator's first start: the federation file it was seeded from."""

    federation: str
    hub: str
    sites: list[FederationSite] = []
    admins: list[StudyAdmin] = []


class FederationSiteAdded(Event, tag="federation.site-added", frozen=True, kw_only=True):
    site: FederationSite


class FederationTerm(Event, tag="federation.term", frozen=True, kw_only=True):
    """The coordinator that holds the lease now begins its term in the federation's stream
    (see `StudyTerm`: the same fence, for the coordinator's `cairn.fed.*` events)."""

    service: str
    term: int
    holder: str


class ValidationTerm(Event, tag="validation.term", frozen=True, kw_only=True):
    """The validator that holds the lease now begins its term for validation runs (see
    `StudyTerm`: the same fence, for the validator's `cairn.validation.*` events), so a
    frozen validator that wakes up cannot finish a run its successor already ended."""

    service: str
    term: int
    holder: str


class SiteConfigLoaded(Event, tag="site.config-loaded", frozen=True, kw_only=True):
    """An agent (re)loaded its study runtime file."""

    site: str
    file: str
    studies: list[str] = []


class SiteConfigRejected(Event, tag="site.config-rejected", frozen=True, kw_only=True):
    """An edit of the study runtime file is broken; the last good version stays in force."""

    site: str
    file: str
    error: str


class BackendDeclared(Event, tag="site.backend", frozen=True, kw_only=True):
    """A site's launcher says which backend runs its workers and what that backend can do.

    Published at every launcher start; the site's agent refuses a deployment that needs a
    capability missing here. Capability names: `gpu`, `multi-node`, `containers`, `cancel`,
    `reconcile`, `memory-limit`, `cpu-affinity`.
    """

    site: str
    backend: str
    capabilities: list[str] = []


class RecordSkipped(Event, tag="site.record-skipped", frozen=True, kw_only=True):
    """A service skipped a stored record it could not decode or act on (and dead-lettered a
    copy): undecodable, or, at a launcher, a launch whose end could never be reported (its
    study is not the site's). Reported once per record.

    Attributes:
        site: The site whose service skipped it.
        service: Which service (`snapshotter`, `launcher`, `agent`, ...).
        store: The stream or KV bucket it was read from.
        key: Its subject (stream), key (KV), or for a launch request its launch id.
        seq: Its stream sequence (0 when unknown).
        error: Why it was skipped.
    """

    site: str
    service: str
    store: str
    key: str
    seq: int = 0
    error: str = ""


class Heartbeat(Event, tag="site.heartbeat", frozen=True, kw_only=True):
    """An agent's liveness and capacity. Not stored in a stream: latest kept in KV `sites`."""

    site: str
    seq: int = 0
    backend: str = "process"
    capacity: Resources = Resources()
    free: Resources = Resources()
    running: int = 0
    studies: list[str] = []
    started_at: datetime | None = None


class SnapshotRecorded(Event, tag="site.snapshot", frozen=True, kw_only=True):
    """A snapshot of a site; the snapshot itself is inline or in the object store."""

    site: str
    digest: str
    taken_at: datetime | None = None
    nodes: int = 1
    object_name: str | None = None
    snapshot: dict[str, Any] | None = None
    reason: str = ""
    """Why it was taken: `start`, `schedule` or `request`."""


class ReadingChange(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    node: str | None = None
    before: Any = None
    after: Any = None


class SnapshotDrift(Event, tag="site.drift", frozen=True, kw_only=True):
    site: str
    previous: str
    current: str
    changes: list[ReadingChange] = []


class ValidationStarted(Event, tag="validation.started", frozen=True, kw_only=True):
    run: str
    site: str
    recipe: str
    snapshot_digest: str = ""
    """Digest of the snapshot the readiness constraints are evaluated against."""
    snapshot_object: str = ""
    """Name of that snapshot's JSON in the `snapshots` object store ("" when there is none)."""
    phases: list[str] = []
    resolved: dict[str, Any] | None = None
    """The resolved recipe (without provenance), so a report needs no catalog to read."""


class ValidationPhase(Event, tag="validation.phase", frozen=True, kw_only=True):
    run: str
    site: str
    recipe: str
    phase: str
    status: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    ctrf: dict[str, Any] | None = None
    reasons: list[str] = []
    """Why the phase did not pass (empty when it passed)."""


class ValidationCompleted(Event, tag="validation.completed", frozen=True, kw_only=True):
    run: str
    site: str
    recipe: str
    status: str
    phases: dict[str, str] = {}
    duration_s: float = 0.0
    message: str = ""
    """Set when the run could not be carried out (e.g. the site is unknown)."""


FederationEvent = (
    FederationSeeded | FederationSiteAdded | FederationTerm | SiteConfigLoaded | SiteConfigRejected
    | BackendDeclared | RecordSkipped
    | SnapshotRecorded | SnapshotDrift | ValidationStarted | ValidationPhase | ValidationCompleted
    | ValidationTerm
)
