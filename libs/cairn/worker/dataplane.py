"""The data plane: messages between the workers of one job, on `cairn.data.<study>.<job>.<...>`.

Addresses: `...<job>.to.<role>.<rank>.<topic>` (one worker) and `...<job>.all.<topic>` (every
worker of the job but the sender).

Why it is correct and cheap:

- A message is published once with JetStream (`Bus.publish_bytes`): `DATA_<study>` stores it
  (audit, limited retention) and the server also pushes it to core subscribers of its subject,
  so delivery costs one store and one push, with no consumer per message.
- A message sent before its receiver listened is not lost: on `start` a receiver first opens
  core subscriptions on its two addresses, *then* replays the stream filtered on them from the
  job's first message. Live messages that arrive meanwhile are held back and merged after the
  replay; every message is deduplicated by id, so each arrives once and in order.
- Payloads that encode to more than the inline limit (1 MiB, or the server's max payload,
  less room for the envelope) go to the job's payload store (`cairn.files.<study>.<job>.p.>`
  in `FILES_<study>`): content-addressed and chunked. Only the reference (sha256, size)
  crosses the subject; the receiver fetches it and checks the digest before decoding. The
  coordinator deletes a job's payloads once it has ended and a grace has passed
  (`cairn.coordinator.retention`); its results are kept.
- A file or a dict of arrays (a model) sent with `send_file` / `send_arrays` streams: it is
  never whole in memory on either end (`cairn.worker.streamed`), and the receiver reads it
  from `Message.payload` (a `StoredPayload`) when it chooses.
- Request/reply rides the same stored path, not NATS request/reply: a core request on a
  subject that a stream captures is answered by the stream's publish ack, not by the peer.
  A request carries a correlation id; the reply goes to the requester's own address.

Payloads: `bytes` travel as they are; anything else as MessagePack (msgspec) where numpy
arrays are an extension (dtype, shape, raw bytes). Nothing is ever unpickled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from cairn import subjects
from cairn.bus import MSGPACK, Bus, ChunkSource, Objects, Replayed, job_payloads, replay
from cairn.errors import CairnError, InvalidInput, Timeout
from cairn.events.decoding import decode_with
from cairn.names import check_name, new_event_id
from cairn.worker.payloadcodec import NDARRAY_EXT as NDARRAY_EXT
from cairn.worker.payloadcodec import decode_payload as decode_payload
from cairn.worker.payloadcodec import encode_payload as encode_payload
from cairn.worker.streamed import (
    STREAMED_CODECS,
    StoredPayload,
    arrays_payload,
    file_payload,
)

log = logging.getLogger("cairn.worker.dataplane")

ONE_MIB = 1024 * 1024
ENVELOPE_ROOM = 16 * 1024  # headers, ids and msgpack framing around an inline body


# -- envelope ------------------------------------------------------------------------------

class Envelope(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What crosses a data subject. `body` inline, or `ref` = sha256 in `artifacts_<study>`."""

    id: str
    topic: str
    src_role: str
    src_rank: int
    src_site: str
    kind: str = "msg"  # one of KINDS
    codec: str = "msgpack"  # one of CODECS
    body: bytes | None = None
    ref: str | None = None
    size: int = 0
    corr: str | None = None
    sent_at: float = 0.0  # the sender's clock, for latency figures only


KINDS = ("msg", "request", "reply", "error")
"""What an envelope's `kind` may be: a message, a request, its reply, or the error raised
while serving the request."""
CODECS = ("raw", "msgpack", *STREAMED_CODECS)
"""What an envelope's `codec` may be: the bytes sent as they are, a MessagePack value, or a
file or arrays streamed through the store (`cairn.worker.streamed`)."""


def worker_address(study: str, job: str, role: str, rank: int, topic: str) -> str:
    """Where one worker of a job receives `topic`."""
    return subjects.data(study, job, "to", role, str(rank), topic)


def broadcast_address(study: str, job: str, topic: str) -> str:
    """Where every worker of a job but the sender receives `topic`."""
    return subjects.data(study, job, "all", topic)


_ENV_ENCODER = msgspec.msgpack.Encoder()
_ENV_DECODER = msgspec.msgpack.Decoder(Envelope)


@dataclass(frozen=True)
class Message:
    """A received data-plane message."""

    topic: str
    payload: Any
    sender_role: str
    sender_rank: int
    sender_site: str
    id: str
    sent_at: float
    via_store: bool  # True when the payload came through the object store


class RemoteError(CairnError):
    """The worker that served a request failed while handling it."""


Handler = Callable[[Message], Awaitable[Any]]


class DataPlane:
    """One worker's end of its job's data plane."""

    def __init__(self, bus: Bus, *, study: str, job: str, site: str, role: str, rank: int,
                 inline_limit: int | None = None) -> None:
        self.bus, self.study, self.job = bus, study, job
        self.site, self.role, self.rank = site, role, rank
        server_max = int(getattr(bus.nc, "max_payload", ONE_MIB) or ONE_MIB)
        self.inline_limit = inline_limit or min(ONE_MIB, server_max) - ENVELOPE_ROOM
        self._queues: dict[str, asyncio.Queue[Envelope]] = {}
        self._handlers: dict[str, Handler] = {}
        self._pending: dict[str, asyncio.Future[Envelope]] = {}
        self._seen: set[str] = set()
        self._held: list[Envelope] | None = []  # live arrivals held back during the replay
        self._subs: list[Any] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._store: Objects | None = None

    # -- addresses -----------------------------------------------------------------------

    def address(self, role: str, rank: int, topic: str) -> str:
        return worker_address(self.study, self.job, role, rank, topic)

    def broadcast_address(self, topic: str) -> str:
        return broadcast_address(self.study, self.job, topic)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self, replay_timeout: float = 30.0) -> None:
        """Listen on this worker's addresses, then catch up on what was sent before (within
        `replay_timeout`: long enough for a cluster's stream to elect a new leader, about
        10 s at worst here, while the read is asked again)."""
        await self.bus.ensure(subjects.data_stream(self.study))
        mine = [self.address(self.role, self.rank, "*"), self.broadcast_address("*")]
        for subject in mine:
            self._subs.append(await self.bus.subscribe_core(subject, self._on_msg))
        stream = subjects.data_stream(self.study).name

        async def catch_up() -> None:
            # One single-filter replay per address, merged in stream order: the broker lets a
            # worker create consumers only with a filter inside its own job's subjects.
            found: list[Replayed[None]] = []
            for subject in mine:
                replayed: AsyncIterator[Replayed[None]] = replay(self.bus, stream, None,
                                                                 filters=[subject])
                found += [r async for r in replayed]
            seen: set[int] = set()
            for r in sorted(found, key=lambda r: r.seq):
                if r.seq not in seen:
                    seen.add(r.seq)
                    self._route(_decode_envelope(r.raw))

        await asyncio.wait_for(catch_up(), replay_timeout)
        held, self._held = self._held or [], None
        for env in held:
            self._route(env)

    async def close(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for fut in self._pending.values():
            fut.cancel()

    async def _on_msg(self, msg: Any) -> None:
        env = _decode_envelope(bytes(msg.data))
        if env is None:
            return
        if self._held is not None:
            self._held.append(env)
        else:
            self._route(env)

    def _route(self, env: Envelope | None) -> None:
        if env is None or env.id in self._seen:
            return
        self._seen.add(env.id)
        if env.src_role == self.role and env.src_rank == self.rank:
            return  # our own broadcast
        if env.kind in ("reply", "error"):
            fut = self._pending.pop(env.corr or "", None)
            if fut is not None and not fut.done():
                fut.set_result(env)
            return  # a reply nobody waits for any more (timed out, or a previous attempt)
        if env.kind == "request" and env.topic in self._handlers:
            self._spawn(self._answer(self._handlers[env.topic], env))
            return
        self._queue(env.topic).put_nowait(env)

    def _queue(self, topic: str) -> asyncio.Queue[Envelope]:
        return self._queues.setdefault(topic, asyncio.Queue())

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- sending -------------------------------------------------------------------------

    async def _objects(self) -> Objects:
        if self._store is None:
            self._store = job_payloads(self.bus, self.study, self.job)
        return self._store

    async def _publish(self, subject: str, topic: str, payload: Any, *, kind: str = "msg",
                       corr: str | None = None) -> str:
        codec, body = encode_payload(payload)
        env = Envelope(id=new_event_id(), topic=topic, src_role=self.role, src_rank=self.rank,
                       src_site=self.site, kind=kind, codec=codec, corr=corr,
                       size=len(body), sent_at=time.time())
        if len(body) > self.inline_limit:
            env.ref = await (await self._objects()).put(body)
        else:
            env.body = body
        await self.bus.publish_bytes(subject, _ENV_ENCODER.encode(env), msg_id=env.id,
                                     content_type=MSGPACK)
        return env.id

    async def _publish_stored(self, subject: str, topic: str, codec: str,
                              source: Any) -> str:
        store = await self._objects()
        digest = await store.put_stream(source)
        info = await store.info(digest)
        env = Envelope(id=new_event_id(), topic=topic, src_role=self.role, src_rank=self.rank,
                       src_site=self.site, codec=codec, ref=digest,
                       size=int((info or {}).get("size") or 0), sent_at=time.time())
        await self.bus.publish_bytes(subject, _ENV_ENCODER.encode(env), msg_id=env.id,
                                     content_type=MSGPACK)
        return env.id

    async def send_file(self, role: str, rank: int, topic: str,
                        source: str | Path | ChunkSource) -> str:
        """Send a file to one worker, streamed: read a block at a time, never whole. `source`
        is its path, or a function making its bytes (called twice: digest, then send; a
        generator or an async one, e.g. another payload's `chunks()`)."""
        check_name(topic, "topic")
        return await self._publish_stored(self.address(role, rank, topic), topic, "file",
                                          file_payload(source))

    async def send_arrays(self, role: str, rank: int, topic: str,
                          arrays: Mapping[str, Any]) -> str:
        """Send a dict of arrays (a model's state) to one worker, array by array, from the
        arrays' own memory; the receiver calls `await msg.payload.arrays()`."""
        check_name(topic, "topic")
        return await self._publish_stored(self.address(role, rank, topic), topic, "arrays",
                                          arrays_payload(arrays))

    async def broadcast_file(self, topic: str, source: str | Path | ChunkSource) -> str:
        """`send_file` to every other worker of the job (stored once, read by each)."""
        check_name(topic, "topic")
        return await self._publish_stored(self.broadcast_address(topic), topic, "file",
                                          file_payload(source))

    async def broadcast_arrays(self, topic: str, arrays: Mapping[str, Any]) -> str:
        """`send_arrays` to every other worker of the job (stored once, read by each)."""
        check_name(topic, "topic")
        return await self._publish_stored(self.broadcast_address(topic), topic, "arrays",
                                          arrays_payload(arrays))

    async def send(self, role: str, rank: int, topic: str, payload: Any) -> str:
        """Send to one worker (stored; delivered even if it starts listening later)."""
        check_name(topic, "topic")
        return await self._publish(self.address(role, rank, topic), topic, payload)

    async def broadcast(self, topic: str, payload: Any) -> str:
        """Send to every other worker of the job."""
        check_name(topic, "topic")
        return await self._publish(self.broadcast_address(topic), topic, payload)

    # -- receiving -----------------------------------------------------------------------

    async def _open(self, env: Envelope) -> Message:
        if env.codec in STREAMED_CODECS and env.ref is not None:
            stored = StoredPayload(await self._objects(), env.ref, env.size, env.codec)
            return Message(topic=env.topic, payload=stored, sender_role=env.src_role,
                           sender_rank=env.src_rank, sender_site=env.src_site, id=env.id,
                           sent_at=env.sent_at, via_store=True)
        if env.ref is not None:
            # Objects.get checks the sha256: a corrupted or swapped object is refused.
            body = await (await self._objects()).get(env.ref, digest=env.ref)
            if len(body) != env.size:
                raise InvalidInput(f"object {env.ref[:12]} has {len(body)} bytes, "
                                   f"expected {env.size}")
        else:
            body = env.body or b""
        return Message(topic=env.topic, payload=decode_payload(env.codec, body),
                       sender_role=env.src_role, sender_rank=env.src_rank,
                       sender_site=env.src_site, id=env.id, sent_at=env.sent_at,
                       via_store=env.ref is not None)

    async def receive(self, topic: str, timeout: float) -> Message:
        """The next message on `topic` (raises `Timeout` after `timeout` seconds)."""
        try:
            env = await asyncio.wait_for(self._queue(topic).get(), timeout)
        except TimeoutError:
            raise Timeout(f"no message on {topic!r} within {timeout:g}s") from None
        return await self._open(env)

    async def poll(self, topic: str) -> Message | None:
        """The next message on `topic` if one is already here, else None (no wait)."""
        try:
            env = self._queue(topic).get_nowait()
        except asyncio.QueueEmpty:
            return None
        return await self._open(env)

    # -- request / reply -----------------------------------------------------------------

    async def request(self, role: str, rank: int, topic: str, payload: Any,
                      timeout: float) -> Message:
        """Ask one worker and wait for its answer.

        Raises:
            Timeout: no answer within `timeout` seconds.
            RemoteError: the other worker's handler raised.
        """
        check_name(topic, "topic")
        corr = new_event_id()
        fut: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._pending[corr] = fut
        try:
            await self._publish(self.address(role, rank, topic), topic, payload,
                                kind="request", corr=corr)
            env = await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise Timeout(f"{role}/{rank} did not answer {topic!r} within {timeout:g}s") \
                from None
        finally:
            self._pending.pop(corr, None)
        answer = await self._open(env)
        if env.kind == "error":
            raise RemoteError(f"{role}/{rank} failed on {topic!r}: {answer.payload}")
        return answer

    def serve(self, topic: str, handler: Handler) -> None:
        """Answer requests on `topic` with `handler`'s return value (also those that came
        before this call)."""
        check_name(topic, "topic")
        self._handlers[topic] = handler
        queue, keep = self._queue(topic), []
        while not queue.empty():
            env = queue.get_nowait()
            if env.kind == "request":
                self._spawn(self._answer(handler, env))
            else:
                keep.append(env)
        for env in keep:
            queue.put_nowait(env)

    async def _answer(self, handler: Handler, env: Envelope) -> None:
        to = self.address(env.src_role, env.src_rank, env.topic)
        try:
            value = await handler(await self._open(env))
            kind = "reply"
        except Exception as exc:
            # The requester is told (RemoteError); the traceback stays in this worker's log.
            log.exception("handler for %r failed", env.topic)
            value, kind = f"{type(exc).__name__}: {exc}", "error"
        await self._publish(to, env.topic, value, kind=kind, corr=env.corr)


def _decode_envelope(data: bytes) -> Envelope | None:
    try:
        return decode_with(_ENV_DECODER, data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.warning("dropping a data-plane message that is not an envelope: %s", exc)
        return None
