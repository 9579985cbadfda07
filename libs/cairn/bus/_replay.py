"""Replay: an ordered read of a stream (or a subject filter) from a sequence or a time."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Generic, TypeVar

import msgspec
from nats.errors import ConnectionClosedError
from nats.js import api
from nats.js.errors import ServiceUnavailableError

from cairn.bus._connection import Bus
from cairn.bus._consumers import create_ephemeral, delete_consumer
from cairn.errors import Unavailable
from cairn.events.decoding import decode_with
from cairn.subjects import misplaced

T = TypeVar("T")
log = logging.getLogger("cairn.bus")

MAX_FETCH_S = 10.0
"""The longest a fetch waits once earlier ones timed out (each timeout doubles the wait)."""
STALL_S = 60.0
"""How long a replay waits for a server that holds more of the history but sends none."""


class Replayed(msgspec.Struct, Generic[T], frozen=True):
    """One stored message as a replay yields it (a Struct: made once per message, it costs
    a tenth of a frozen dataclass)."""

    seq: int
    subject: str
    time: datetime | None
    event: T | None
    raw: bytes
    error: str | None = None
    headers: dict[str, str] | None = None


async def replay(bus: Bus, stream: str, decoder: msgspec.json.Decoder[T] | None = None, *,
                 filters: Sequence[str] = (), start_seq: int | None = None,
                 start_time: datetime | None = None, batch: int = 1000,
                 fetch_timeout: float = 2.0, last_per_subject: bool = False,
                 headers_only: bool = False,
                 trusted: bool = False) -> AsyncIterator[Replayed[T]]:
    """Yield every stored message of `stream` in order, up to the end as of the call.

    An event that does not decode is yielded with `event=None` and the error, not raised:
    a replay shows history as it is. So is one that is not its writer's to write where it is
    stored (`cairn.subjects.misplaced`): a forgery is never folded, at start or later. Its
    report is the live consumer's job; `trusted` skips the check (raw history tools only).
    `last_per_subject` gives only the newest message of each subject (a KV bucket's keys).
    """
    opt_seq: int | None = None
    opt_time: datetime | None = None
    if start_seq is not None:
        policy, opt_seq = api.DeliverPolicy.BY_START_SEQUENCE, start_seq
    elif start_time is not None:
        policy = api.DeliverPolicy.BY_START_TIME
        opt_time = start_time
    elif last_per_subject:
        policy = api.DeliverPolicy.LAST_PER_SUBJECT
    else:
        policy = api.DeliverPolicy.ALL
    filters = list(filters)
    # Named, with one of this identity's own names, so a single filter travels in the API
    # subject ($JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>), where the broker's
    # permissions confine an identity (a worker) to its own subjects of a shared stream.
    config = api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE, deliver_policy=policy, inactive_threshold=30.0,
        filter_subject=filters[0] if len(filters) == 1 else None,
        filter_subjects=filters if len(filters) > 1 else None, mem_storage=True,
        max_waiting=1, opt_start_seq=opt_seq, opt_start_time=opt_time,
        headers_only=headers_only or None)
    js = bus.js
    info = await create_ephemeral(bus, stream, config, purpose="replay")
    name = str(info.name)
    psub = await js.pull_subscribe_bind(consumer=name, stream=stream)
    last_seq: int | None = None
    stalled_since: float | None = None
    wait = fetch_timeout
    try:
        pending = int(info.num_pending or 0)
        while pending > 0:
            try:
                msgs = await psub.fetch(min(batch, pending), timeout=wait)
            except ConnectionClosedError:
                raise Unavailable(f"replay of {stream}: the connection to NATS is closed "
                                  f"({bus.lost_reason or 'closed'})") from None
            except (TimeoutError, ServiceUnavailableError):
                # A busy server (or, in a cluster, one that died under this consumer), not
                # the end of the history: a replay that stopped here would
                # fold a shorter past (a service's state at start, a test's proof) and say
                # nothing. Read on from the last message yielded, on a consumer made afresh
                # (what a late delivery to the timed-out fetch took is read again, not lost),
                # until the server stays silent for STALL_S.
                now = time.monotonic()
                stalled_since = stalled_since or now
                if now - stalled_since >= STALL_S:
                    raise Unavailable(f"replay of {stream}: {pending} message(s) not "
                                      f"delivered within {STALL_S:g}s") from None
                # A longer wait costs nothing once messages flow (a fetch returns as soon as
                # they come), and gives a busy server the time it needs.
                wait = min(wait * 2, max(fetch_timeout, MAX_FETCH_S))
                log.info("replay of %s: none of %d pending delivered; reading on from %s "
                         "(next fetch waits %.3gs)", stream, pending,
                         "the start" if last_seq is None else f"seq {last_seq + 1}", wait)
                if last_seq is None or not last_per_subject:
                    with contextlib.suppress(Exception):
                        await psub.unsubscribe()
                    await delete_consumer(bus, stream, name)
                    if last_seq is not None:
                        config = replace(config, opt_start_seq=last_seq + 1,
                                         deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                                         opt_start_time=None)
                    info = await create_ephemeral(bus, stream, config, purpose="replay")
                    name = str(info.name)
                    psub = await js.pull_subscribe_bind(consumer=name, stream=stream)
                    pending = int(info.num_pending or 0)
                continue
            stalled_since = None
            for msg in msgs:
                meta = msg.metadata
                pending = int(meta.num_pending or 0)
                last_seq = int(meta.sequence.stream)
                event: T | None = None
                error: str | None = None
                if decoder is not None:
                    try:
                        event = decode_with(decoder, msg.data)
                    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                        error = str(exc)
                    if event is not None and not trusted:
                        error = misplaced(event, msg.subject) or None
                        if error is not None:
                            event = None
                yield Replayed(seq=last_seq, subject=msg.subject,
                               time=meta.timestamp, event=event, raw=bytes(msg.data),
                               error=error, headers=dict(msg.headers or {}))
    finally:
        try:
            await psub.unsubscribe()
        except Exception:
            pass
        await delete_consumer(bus, stream, name)
