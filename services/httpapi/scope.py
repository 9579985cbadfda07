"""Who is asking, and what they may see: the caller's own bus rights, nothing else.

A caller is the identity of its token (`cairn.trust.apitoken`). What it may read through the
API is what the broker would let that identity subscribe to now: its permissions are derived
with `cairn.trust.permissions.permissions` from the subject table and the studies' current
membership (this service's own fold of the study streams), and every read is a question of
the form "may this identity subscribe to the subject this fact is stored on?". There is no
second access list to drift from the broker's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cairn import subjects
from cairn.errors import NotFound
from cairn.trust.credentials import Identity, Kind
from cairn.trust.permissions import Membership, covers, permissions

PROBE_JOB = "j-probe"


matches = covers
"""Whether the NATS `pattern` matches `subject` (`*` one token, `>` the rest), as the server
matches a subscription (`cairn.trust.permissions.covers`)."""


@dataclass(frozen=True)
class Caller:
    """A verified caller and the subjects it may subscribe to; `identity` None: an insecure
    federation, where every caller reads everything (and the API says so)."""

    identity: Identity | None
    sub_allow: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.identity.name if self.identity else "anonymous (insecure federation)"

    def may_read(self, subject: str) -> bool:
        if self.identity is None:
            return True
        return any(matches(p, subject) for p in self.sub_allow)

    def may_read_study(self, study: str) -> bool:
        return self.may_read(subjects.job(study, PROBE_JOB, "submitted"))

    def may_read_site(self, site: str) -> bool:
        return self.may_read(subjects.site_event(site, "snapshot"))

    def may_read_evidence(self, site: str, recipe: str) -> bool:
        return self.may_read(subjects.evidence(site, recipe))

    def may_read_validation(self, site: str, recipe: str) -> bool:
        return self.may_read(subjects.validation(site, recipe, "completed"))

    def studies(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if self.may_read_study(n)]

    def require_study(self, study: str) -> None:
        """Raises NotFound (not PermissionDenied: a caller learns nothing of a study it may
        not read, not even that it exists)."""
        if not self.may_read_study(study):
            raise NotFound(f"no study {study}", field="study")


def caller_of(identity: Identity, user_key: str,
              membership: Mapping[str, Membership]) -> Caller:
    """The caller `identity` as the broker would see it connect now."""
    if identity.kind in (Kind.WORKER, Kind.API):
        # A worker's credential is for its job's subjects on the bus, not for the API; the
        # API's own is what it reads with for everyone, never a caller's.
        return Caller(identity=identity, sub_allow=())
    granted = permissions(identity, user_key, membership)
    return Caller(identity=identity, sub_allow=granted.sub_allow)
