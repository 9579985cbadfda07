"""Study administration events (coordinator), on `cairn.study.<study>.admin.<verb>`."""

from __future__ import annotations

from typing import Literal

import msgspec

from cairn.events.base import Event

Role = Literal["project_admin", "org_admin", "lead", "member"]


class StudyAdmin(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    org: str
    role: Role = "member"


class StudyCreated(Event, tag="study.created", frozen=True, kw_only=True):
    """A study exists, with its first sites and admins."""

    name: str
    sites: list[str] = []
    admins: list[StudyAdmin] = []
    description: str = ""


class StudySiteAdded(Event, tag="study.site-added", frozen=True, kw_only=True):
    site: str


class StudySiteRemoved(Event, tag="study.site-removed", frozen=True, kw_only=True):
    site: str


class StudyAdminAdded(Event, tag="study.admin-added", frozen=True, kw_only=True):
    admin: StudyAdmin


class StudyAdminRemoved(Event, tag="study.admin-removed", frozen=True, kw_only=True):
    name: str


class StudyHold(Event, tag="study.hold", frozen=True, kw_only=True):
    """The study's admins hold its queue (`held`), or release it: while held, no job of the
    study is dispatched and none times out in the queue; a release starts each queued job's
    queue timeout again.

    Attributes:
        held: True to hold, False to release.
        reason: Why, for whoever lists the queue.
    """

    held: bool
    reason: str = ""


class StudyTerm(Event, tag="study.term", frozen=True, kw_only=True):
    """The coordinator that holds the lease now begins its term in this study's stream:
    from here on JetStream stores the coordinator's events only while this is the last
    `study.term` (`cairn.bus.Fence`), so a coordinator of an earlier term is refused by the
    server itself. Changes nothing of the study.

    Attributes:
        service: The leased service whose term it is (`coordinator`).
        term: Its lease's term (the KV revision that took it): larger for every later one.
        holder: Who holds it, `service@host:pid` (for operators).
    """

    service: str
    term: int
    holder: str


StudyAdminEvent = (
    StudyCreated | StudySiteAdded | StudySiteRemoved | StudyAdminAdded | StudyAdminRemoved
    | StudyHold | StudyTerm
)
