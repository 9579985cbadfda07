"""The study aggregate: who takes part. A pure fold over `study.*` events."""

from __future__ import annotations

from datetime import datetime

import msgspec

from cairn.events import (
    StudyAdmin,
    StudyAdminAdded,
    StudyAdminRemoved,
    StudyCreated,
    StudyHold,
    StudySiteAdded,
    StudySiteRemoved,
)


class StudyState(msgspec.Struct, frozen=True, kw_only=True):
    """A study as its events made it.

    Attributes:
        name: The study's name (a subject token).
        sites: Participating sites, in the order they joined.
        admins: Admins by name.
        created_at: When `study.created` happened.
        held: Whether its queue is held (`study.hold`): nothing of it is dispatched.
        hold_reason: Why, as the admin who held it said.
        released_at: When it was last released (a queued job's queue timeout counts from
            then).
    """

    name: str
    sites: tuple[str, ...] = ()
    admins: dict[str, StudyAdmin] = {}
    description: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    held: bool = False
    hold_reason: str = ""
    released_at: datetime | None = None


StudyAdminEvents = (StudyCreated, StudySiteAdded, StudySiteRemoved, StudyAdminAdded,
                    StudyAdminRemoved, StudyHold)


def apply(state: StudyState | None, event: object) -> StudyState | None:
    """Apply one event; events of other aggregates leave the state as it is."""
    match event:
        case StudyCreated():
            if state is not None:
                return state  # created once; a replayed create changes nothing
            return StudyState(name=event.name, sites=tuple(dict.fromkeys(event.sites)),
                              admins={a.name: a for a in event.admins},
                              description=event.description, created_at=event.at,
                              updated_at=event.at)
        case StudySiteAdded() if state is not None and event.site not in state.sites:
            return msgspec.structs.replace(state, sites=(*state.sites, event.site),
                                           updated_at=event.at)
        case StudySiteRemoved() if state is not None and event.site in state.sites:
            return msgspec.structs.replace(
                state, sites=tuple(s for s in state.sites if s != event.site),
                updated_at=event.at)
        case StudyAdminAdded() if state is not None:
            return msgspec.structs.replace(state, admins={**state.admins,
                                                          event.admin.name: event.admin},
                                           updated_at=event.at)
        case StudyAdminRemoved() if state is not None and event.name in state.admins:
            admins = {k: v for k, v in state.admins.items() if k != event.name}
            return msgspec.structs.replace(state, admins=admins, updated_at=event.at)
        case StudyHold() if state is not None and event.held != state.held:
            return msgspec.structs.replace(
                state, held=event.held, hold_reason=event.reason if event.held else "",
                released_at=state.released_at if event.held else event.at,
                updated_at=event.at)
    return state
