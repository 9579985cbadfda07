"""The base event and the helpers every event module shares."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypedDict

import msgspec

from cairn.names import new_event_id


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Every fact on the bus.

    Attributes:
        id: Unique id; also the `Nats-Msg-Id` header, so JetStream drops duplicates.
        at: UTC time the fact happened (reducers take time from here, never a clock).
        source: Who wrote it, `service@site`.
        study: The study it belongs to, where it has one.
        actor: Who asked for it, where a person or program asked.
        cause: Id of the event or command that led to it.
    """

    id: str
    at: datetime
    source: str
    study: str | None = None
    actor: str | None = None
    cause: str | None = None


def now() -> datetime:
    return datetime.now(UTC)


class Stamp(TypedDict):
    id: str
    at: datetime


def stamp() -> Stamp:
    """Fresh `id` and `at` for a new event: `JobSubmitted(**stamp(), ...)`."""
    return {"id": new_event_id(), "at": now()}


class EventEnvelope(TypedDict):
    """The fields every event starts with (see `Event`), to spread into its constructor."""

    id: str
    at: datetime
    source: str
    study: str | None
    actor: str | None
    cause: str | None


def event_envelope(source: str, *, study: str | None = None, actor: str | None = None,
             cause: str | None = None, id: str | None = None,
             at: datetime | None = None) -> EventEnvelope:
    """The envelope of a new event: `DeploymentAccepted(**event_envelope(...), job=...)`.

    Args:
        source: Who writes it, `service@site`.
        id: Its id where it must be the same every time it is decided (`<launch id>.accepted`:
            a decision made twice is then dropped as a duplicate); default a fresh one.
        at: When it happened, where the writer's clock is passed in (a pure decision);
            default now.
    """
    return {"id": id if id is not None else new_event_id(), "at": at if at is not None else now(),
            "source": source, "study": study, "actor": actor, "cause": cause}
