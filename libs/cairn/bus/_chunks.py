"""An object's chunks written and read in a bounded window, carrying on after a dropped
connection without sending again what the store already holds.

Writing: chunks go out `WINDOW` at a time, each acknowledged by the stream. When the
connection drops, the client reconnects by itself; what it had published but the server
never stored has no ack. The writer then sends again from the first chunk without an ack,
only that and what followed it. Chunks the client buffered while it was disconnected may
reach the stream *before* the ones sent again, so a chunk carries its index (`Cairn-Chunk`)
and a reader takes, in stream order, the first message with the index it expects next:
what was stored twice or out of turn is skipped, and the digest of the whole checks the
result. A NATS object store's own chunks (no header) are taken in order, as there.

Reading: an ephemeral consumer of the reader's own (`cairn.bus._consumers`) from the
subject's first message; after a dropped connection a new one starts just after the last
message read, so a read carries on from its last chunk.

Memory: at most `WINDOW` chunks in flight out and `READ_BATCH` in, whatever the size.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

from nats.errors import Error as NatsError
from nats.js import api
from nats.js.errors import APIError

from cairn.bus._connection import Bus
from cairn.bus._consumers import create_ephemeral, delete_consumer
from cairn.errors import NotFound, Unavailable

log = logging.getLogger("cairn.bus.chunks")

CHUNK = 128 * 1024
WINDOW = 16
"""Chunks written at once (2 MiB): each is copied a few times on its way into the socket,
and a larger window buys no speed on a local link (`make bench`)."""
READ_BATCH = 16
"""Chunks asked for at once when reading (2 MiB)."""
CHUNK_HEADER = "Cairn-Chunk"
ACK_WAIT_S = 10.0
"""How long a window waits for its acks when the connection did not drop."""
STALL_S = 120.0
"""How long a transfer may make no progress (no chunk stored or read) before it gives up."""


Parts = Iterable[bytes | memoryview] | AsyncIterable[bytes | memoryview]
"""An object's bytes in parts of any size, from a generator or an async one (another
object being read, say)."""


async def parts_of(parts: Parts) -> AsyncIterator[bytes | memoryview]:
    if isinstance(parts, AsyncIterable):
        async for part in parts:
            yield part
    else:
        for part in parts:
            yield part


async def rechunk(parts: Parts, size: int = CHUNK) -> AsyncIterator[bytes]:
    """`parts` (of any sizes) as chunks of `size` bytes, the last one shorter."""
    buf = bytearray()
    async for part in parts_of(parts):
        view = memoryview(part).cast("B")
        while len(view):
            take = min(size - len(buf), len(view))
            buf += view[:take]
            view = view[take:]
            if len(buf) == size:
                yield bytes(buf)
                buf.clear()
    if buf:
        yield bytes(buf)


class _Reconnects:
    """Set each time the bus reconnects, for as long as the block runs."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self.event = asyncio.Event()

    def __enter__(self) -> _Reconnects:
        self._bus.reconnect_listeners.append(self.event.set)
        return self

    def __exit__(self, *_: object) -> None:
        with contextlib.suppress(ValueError):
            self._bus.reconnect_listeners.remove(self.event.set)


async def _connected(bus: Bus, until: float) -> None:
    while not bus.nc.is_connected:
        if time.monotonic() > until:
            raise Unavailable("the connection to NATS did not come back")
        await asyncio.sleep(0.05)


async def write_chunks(bus: Bus, subject: str, chunks: AsyncIterator[bytes]) -> int:
    """Store `chunks` on `subject` in order; how many there were.

    Raises:
        Unavailable: no chunk could be stored for `STALL_S` seconds.
    """
    js = bus.js
    window: list[tuple[int, bytes]] = []
    count = 0
    with _Reconnects(bus) as reconnects:
        stalled_since = time.monotonic()
        while True:
            while len(window) < WINDOW and (data := await anext(chunks, None)) is not None:
                window.append((count, data))
                count += 1
            if not window:
                return count
            reconnects.event.clear()
            futures: list[asyncio.Future[Any]] = []
            for index, data in window:
                try:
                    futures.append(await js.publish_async(subject, data,
                                                          headers={CHUNK_HEADER: str(index)}))
                except (NatsError, ConnectionError, OSError, TimeoutError) as exc:
                    # Closed or reconnecting with a full buffer: the rest of the window waits.
                    log.info("%s: chunk %d not sent (%s)", subject, index, exc)
                    break
            acked = await _acks(futures, reconnects.event) if futures else 0
            if acked:
                stalled_since = time.monotonic()
            elif time.monotonic() - stalled_since > STALL_S:
                raise Unavailable(f"no chunk of {subject} stored for {STALL_S:g}s")
            if acked < len(window):
                log.info("%s: chunk %d had no ack; sending again from it", subject,
                         window[acked][0])
                await _connected(bus, stalled_since + STALL_S)
            window = window[acked:]


async def _acks(futures: list[asyncio.Future[Any]], reconnected: asyncio.Event) -> int:
    """How many of `futures`, from the first, were acknowledged (the rest are given up)."""
    gathered = asyncio.ensure_future(asyncio.gather(*futures, return_exceptions=True))
    dropped = asyncio.ensure_future(reconnected.wait())
    try:
        await asyncio.wait({gathered, dropped}, timeout=ACK_WAIT_S,
                           return_when=asyncio.FIRST_COMPLETED)
        if not gathered.done() and dropped.done():
            # Reconnected: what was in the socket is lost, what was buffered is on its way.
            await asyncio.wait({gathered}, timeout=1.0)
    finally:
        dropped.cancel()
    acked = 0
    for fut in futures:
        if not fut.done() or fut.cancelled():
            break
        if isinstance(exc := fut.exception(), APIError):
            for rest in futures:
                rest.cancel()
            # The stream refused the chunk (full, or not this writer's): sending it again
            # would be refused again.
            raise Unavailable(f"the store refused a chunk: {exc}")
        if exc is not None:
            break
        acked += 1
    for fut in futures:
        fut.cancel()  # frees the client's slot of an ack that will never come
    gathered.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await gathered
    return acked


async def read_chunks(bus: Bus, stream: str, subject: str, count: int
                      ) -> AsyncIterator[bytes]:
    """The `count` chunks stored on `subject`, in order.

    Raises:
        NotFound: the stream holds fewer chunks than `count` (and no more come).
        Unavailable: nothing could be read for `STALL_S` seconds.
    """
    with _Reconnects(bus) as reconnects:
        async for chunk in _read(bus, stream, subject, count, reconnects.event):
            yield chunk


async def _read(bus: Bus, stream: str, subject: str, count: int, reconnected: asyncio.Event
                ) -> AsyncIterator[bytes]:
    expected, after, seen = 0, 0, 0  # seen: messages read, chunks skipped included
    stalled_since = time.monotonic()
    while expected < count:
        reconnected.clear()
        start: dict[str, Any] = ({"deliver_policy": api.DeliverPolicy.BY_START_SEQUENCE,
                                  "opt_start_seq": after + 1} if after
                                 else {"deliver_policy": api.DeliverPolicy.ALL})
        config = api.ConsumerConfig(ack_policy=api.AckPolicy.NONE, filter_subject=subject,
                                    mem_storage=True, inactive_threshold=30.0,
                                    max_waiting=1, **start)
        name, psub, delivered = "", None, 0
        try:
            name = str((await create_ephemeral(bus, stream, config, purpose="object")).name)
            psub = await bus.js.pull_subscribe_bind(consumer=name, stream=stream)
            while expected < count:
                try:
                    msgs = await _fetch(psub, min(READ_BATCH, count - expected), reconnected)
                except TimeoutError:
                    if bus.nc.is_connected and await _stored(bus, stream, subject) <= seen:
                        raise NotFound(f"object chunks on {subject}: {expected} of {count} "
                                       "are there") from None
                    break  # the connection dropped: a new consumer from where we are
                if msgs is None:
                    break  # reconnected: what was in flight is lost; again from where we are
                if _delivered_after(msgs, delivered) is None:
                    # A message lost with the connection: the consumer has moved past it
                    # (nothing is acked), so a new one starts after the last one read.
                    log.info("reading %s: a chunk was lost in flight; again after chunk %d",
                             subject, expected)
                    break
                for m in msgs:
                    after, seen, delivered = m.metadata.sequence.stream, seen + 1, delivered + 1
                    index = (m.headers or {}).get(CHUNK_HEADER)
                    if index is None or int(index) == expected:
                        expected += 1
                        stalled_since = time.monotonic()
                        yield bytes(m.data)
        except (TimeoutError, ConnectionError, OSError, NatsError) as exc:
            log.info("reading %s: %s; carrying on after chunk %d", subject, exc, expected)
        finally:
            if psub is not None:
                with contextlib.suppress(Exception):
                    await psub.unsubscribe()
            if name:
                with contextlib.suppress(Exception):
                    await delete_consumer(bus, stream, name)
        if expected < count:
            if time.monotonic() - stalled_since > STALL_S:
                raise Unavailable(f"no chunk of {subject} read for {STALL_S:g}s")
            await _connected(bus, stalled_since + STALL_S)


async def _fetch(psub: Any, batch: int, reconnected: asyncio.Event) -> list[Any] | None:
    """Up to `batch` messages; None when the connection came back meanwhile."""
    fetching = asyncio.ensure_future(psub.fetch(batch, timeout=5.0))
    dropped = asyncio.ensure_future(reconnected.wait())
    try:
        await asyncio.wait({fetching, dropped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        dropped.cancel()
    if not fetching.done():
        fetching.cancel()
        with contextlib.suppress(BaseException):
            await fetching
        return None
    msgs: list[Any] = fetching.result()
    return msgs


def _delivered_after(msgs: list[Any], delivered: int) -> int | None:
    """The consumer's count of deliveries after `msgs`, or None if one is missing."""
    for m in msgs:
        if m.metadata.sequence.consumer != delivered + 1:
            return None
        delivered += 1
    return delivered


async def _stored(bus: Bus, stream: str, subject: str) -> int:
    """How many messages the stream holds on `subject` (a large number when it cannot
    say: the reader tries again rather than give up)."""
    try:
        info = await bus.js.stream_info(stream, subjects_filter=subject)
    except (TimeoutError, NatsError):
        return 1 << 62
    return int((info.state.subjects or {}).get(subject, 0))
