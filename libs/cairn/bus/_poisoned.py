"""Stored records that do not decode: skipped at start, with a dead letter and an event.

A service that starts from the last record of a subject or from a KV entry must not be held
hostage by one garbage message there: it reports the record (a `DeadLettered` copy on
`cairn.deadletter.<store>`, a `site.record-skipped` event in FEDERATION) and starts without it.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from nats.js.errors import NotFoundError

from cairn import subjects
from cairn.bus._connection import Bus
from cairn.errors import CairnError, InvalidInput
from cairn.events import DeadLettered, RecordSkipped, stamp

log = logging.getLogger("cairn.bus")

REPORT_TIMEOUT_S = 5.0
"""A report that cannot be published in this time is logged and dropped: the service starts."""


class StoredMessage(NamedTuple):
    """One message as a stream stores it."""

    seq: int
    subject: str
    headers: dict[str, str]
    data: bytes


class UndecodableRecord(InvalidInput):
    """A stored record that does not decode as what its subject or bucket promises.

    `key` is the subject (stream) or key (KV); `subject` is where the record lives on the
    bus (for KV, `$KV.<bucket>.<key>`), so a dead letter's redrive puts it back there.
    """

    def __init__(self, message: str, *, store: str, key: str, seq: int, data: bytes,
                 headers: dict[str, str] | None = None, subject: str | None = None) -> None:
        super().__init__(message)
        self.store = store
        self.key = key
        self.seq = seq
        self.data = data
        self.headers = headers or {}
        self.subject = subject or key


async def last_stored(bus: Bus, stream: str, subject: str) -> StoredMessage | None:
    """The last message stored on `subject` in `stream`, with its sequence, or None."""
    try:
        msg = await bus.js.get_last_msg(stream, subject, direct=True)
    except NotFoundError:
        return None
    return StoredMessage(int(msg.seq or 0), str(msg.subject or ""), dict(msg.headers or {}),
                         bytes(msg.data or b""))


async def report_skipped(bus: Bus, record: UndecodableRecord, *, site: str,
                         service: str) -> None:
    """Dead-letter a copy of `record` and publish `site.record-skipped`; never raises."""
    log.error("%s@%s skipped record %s seq %d in %s: %s", service, site, record.key,
              record.seq, record.store, record.message)
    letter = DeadLettered(
        **stamp(), source=f"{service}@{site}", stream=record.store, subject=record.subject,
        consumer=f"{service}@{site}", stream_seq=record.seq, headers=record.headers,
        payload_b64=base64.b64encode(record.data[:1 << 20]).decode(),
        error=f"undecodable at start: {record.message}"[:2000])
    skipped = RecordSkipped(**stamp(), source=f"{service}@{site}", site=site, service=service,
                            store=record.store, key=record.key, seq=record.seq,
                            error=record.message[:2000])
    try:
        await bus.ensure(subjects.DEADLETTER_STREAM)
        await bus.publish(letter, timeout=REPORT_TIMEOUT_S)
        await bus.publish(skipped, timeout=REPORT_TIMEOUT_S)
    except (CairnError, OSError) as exc:
        log.warning("could not report the skipped record: %s", exc)


Skipper = Callable[[UndecodableRecord], Awaitable[None]]


def skipper(bus: Bus, *, service: str, site: str | None = None) -> Skipper:
    """`report_skipped` bound to one service, as `kv(..., on_undecodable=)` takes it.

    Without `site`, the record's key names the site (KV `sites` is keyed by site name).
    """

    async def skip(record: UndecodableRecord) -> None:
        await report_skipped(bus, record, site=site or record.key, service=service)

    return skip
