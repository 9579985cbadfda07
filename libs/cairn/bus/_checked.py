"""Events that arrive on plain subscriptions (not stored, or read live), checked like stored
ones: decoded, and acted on only when their subject is their writer's (see
`cairn.subjects.misplaced`)."""

from __future__ import annotations

import logging
from typing import Any, TypeVar

import msgspec

from cairn.events.decoding import decode_with
from cairn.subjects import misplaced

T = TypeVar("T")
log = logging.getLogger("cairn.bus")


def decode_event(decoder: msgspec.json.Decoder[T], msg: Any) -> T | None:
    """The event in a core message, or None (logged) when it is garbage or a forgery."""
    subject = str(getattr(msg, "subject", ""))
    try:
        event = decode_with(decoder, msg.data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.warning("ignoring an undecodable message on %s: %s", subject, exc)
        return None
    wrong = misplaced(event, subject)
    if wrong:
        log.warning("ignoring a %s on %s: %s", type(event).__name__, subject, wrong)
        return None
    return event
