"""Durable pull consumers: explicit ack, bounded redelivery with backoff, dead letters.

A handler that raises is retried (nak with a delay from the backoff list) until the last
delivery; then the message is wrapped in a `DeadLettered` event on `cairn.deadletter.<stream>`
and acked, so one poison message never blocks the ones behind it. A message that cannot be
decoded at all is dead-lettered at once.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
from nats.aio.msg import Msg
from nats.js import api
from nats.js.errors import NotFoundError

from cairn import subjects, telemetry
from cairn.bus._connection import MSG_ID, Bus
from cairn.bus._pull import PullFailed, Pulls
from cairn.events import DeadLettered, now
from cairn.events.decoding import decode_with

log = logging.getLogger("cairn.bus")
T = TypeVar("T")
ACKS_HELD_S = 0.05
"""How long a handled message's ack may wait for the rest of its batch (far below any
consumer's ack_wait, so a slow batch never has its first messages delivered again)."""
_clock = time.monotonic


@dataclass(frozen=True)
class Delivery:
    """Where a consumed event came from."""

    subject: str
    stream: str
    stream_seq: int
    deliveries: int
    headers: dict[str, str]


Handler = Callable[[T, Delivery], Awaitable[None]]


class Subscription(Generic[T]):
    """One durable pull consumer and the loop that feeds its handler."""

    def __init__(self, bus: Bus, *, stream: str, durable: str, filters: Sequence[str],
                 decoder: msgspec.json.Decoder[T], handler: Handler[T],
                 max_deliver: int = 5, backoff: Sequence[float] = (0.2, 1.0, 5.0, 15.0),
                 batch: int = 64, ack_wait: float = 30.0, fetch_timeout: float = 1.0,
                 deliver_new: bool = False) -> None:
        self.bus = bus
        self.stream = stream
        self.durable = durable
        self.filters = list(filters)
        self.decoder = decoder
        self.handler = handler
        self.max_deliver = max_deliver
        self.backoff = list(backoff)
        self.batch = batch
        self.ack_wait = ack_wait
        self.fetch_timeout = fetch_timeout
        self.deliver_new = deliver_new
        self.processed = 0
        self.dead_lettered = 0
        self.recreated = 0
        self.last_seq = 0
        """The stream sequence of the last message handled: a consumer that disappears is
        made again from the one after it."""
        self._pulls: Pulls | None = None
        self._acks: list[Msg] = []
        """Handled messages whose acks are held until the batch ends or ACKS_HELD_S pass."""
        self._acks_since = 0.0
        self._unconfirmed: Msg | None = None
        """The last message whose ack was sent and not yet confirmed applied."""
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    def _config(self) -> api.ConsumerConfig:
        return api.ConsumerConfig(
            # Named too: the create's API subject then names the consumer (and its filter,
            # when there is one), where the broker checks that this identity owns it.
            name=self.durable, durable_name=self.durable,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            deliver_policy=api.DeliverPolicy.NEW if self.deliver_new else api.DeliverPolicy.ALL,
            filter_subject=self.filters[0] if len(self.filters) == 1 else None,
            filter_subjects=self.filters if len(self.filters) > 1 else None,
            max_ack_pending=1000,
        )

    async def _bind(self) -> None:
        try:
            await self.bus.js.add_consumer(self.stream, self._config())
        except Exception as exc:
            log.debug("add_consumer %s/%s: %s", self.stream, self.durable, exc)
        pulls = Pulls(self.bus, stream=self.stream, durable=self.durable)
        await pulls.subscribe()
        self._pulls = pulls

    async def start(self) -> None:
        await self.bus._retry(self._bind, what=f"consumer {self.stream}/{self.durable}")
        self._task = asyncio.create_task(self._run(), name=f"consume:{self.durable}")

    async def stop(self) -> None:
        """Stop fetching, finish and ack what is in flight; a pull request still open at the
        server is followed to its end, and what it delivers is given back at once."""
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def _run(self) -> None:
        delay = 0.05
        more = False
        while not self._stopping.is_set():
            if self._pulls is None:  # a rebind failed: try again
                await self._rebind()
                continue
            try:
                # Idle, a long poll for one message (handed over the moment it arrives, and
                # cut short by a stop); with a backlog, what is there, in one request.
                msgs = (await self._pulls.pull(self.batch) if more else
                        await self._pulls.pull(1, wait=self.fetch_timeout, stop=self._stopping))
            except Exception as exc:
                more = False
                if self._stopping.is_set():
                    break
                gone = isinstance(exc, PullFailed) and exc.consumer_gone
                if not gone:
                    # A lost connection, a leader change: try again, slower each time, and
                    # look whether the consumer is still there.
                    log.debug("fetch on %s failed: %s", self.durable, exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
                await self._rebind()
                continue
            delay = 0.05
            # A full batch hints at a backlog: drain it before waiting again.
            more = len(msgs) >= (self.batch if more else 1)
            if msgs:
                await self._handle_batch(msgs)
        await self._release_pulls()
        await self._confirm_acks()

    async def _release_pulls(self) -> None:
        """Give up this instance's inbox (`Pulls.close`); what it holds is handled too, not
        left to come back after ack_wait."""
        if self._pulls is not None:
            pulls, self._pulls = self._pulls, None
            left = await pulls.close()
            if left:
                await self._handle_batch(left)

    async def _handle_batch(self, msgs: list[Msg]) -> None:
        self._idle.clear()
        try:
            # Everything fetched is handled and acked, even when a stop arrives meanwhile
            # (and a stop confirms the acks: `_confirm_acks`).
            try:
                for msg in msgs:
                    await self._handle(msg)
                    if self._acks and self._acks_since + ACKS_HELD_S <= _clock():
                        await self._send_acks()
            finally:
                await self._send_acks()
            await self.bus.nc.flush(timeout=5)
        except Exception as exc:
            log.debug("flush after batch failed: %s", exc)
        finally:
            self._idle.set()

    async def _send_acks(self) -> None:
        """The acks held back while a batch is handled, sent together: one at a time, each
        was a socket write (and a TLS record) of its own, the largest part of a busy
        consumer's time after its handler. nats-py's publish only appends to its buffer
        (it waits only when that buffer is over its limit), so with nothing awaited in
        between they leave in one write."""
        acks, self._acks = self._acks, []
        for msg in acks:
            await _quiet(msg.ack())
        if acks:
            self._unconfirmed = acks[-1]

    async def _confirm_acks(self) -> None:
        """Wait until the server has applied every ack sent: it applies them in order, on a
        queue of its own after answering a flush, and answers an ack that asks for a reply
        once it is applied (a repeated one too). A stopped consumer then shows nothing
        pending that it handled."""
        msg, self._unconfirmed = self._unconfirmed, None
        if msg is not None and msg.reply:
            await _quiet(self.bus.nc.request(msg.reply, b"", timeout=5))

    async def _rebind(self) -> None:
        await self._release_pulls()
        try:
            if await self._gone():
                await self._recreate()
            await self._bind()
        except Exception as exc:
            log.debug("rebind %s failed: %s", self.durable, exc)
            await asyncio.sleep(0.5)

    async def _gone(self) -> bool:
        try:
            await self.bus.js.consumer_info(self.stream, self.durable)
        except NotFoundError:
            return True
        except Exception:
            return False  # cannot tell (the server is away): bind as usual and see
        return False

    async def _recreate(self) -> None:
        """The durable consumer was deleted (by an operator, or by anyone who could): make it
        again from the message after the last one handled, and say so."""
        config = self._config()
        if self.last_seq:
            config = config.evolve(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                                   opt_start_seq=self.last_seq + 1)
        await self.bus.js.add_consumer(self.stream, config)
        self.recreated += 1
        log.error("consumer %s on %s had disappeared: made it again, resuming after stream "
                  "sequence %d", self.durable, self.stream, self.last_seq)

    async def _handle(self, msg: Msg) -> None:
        meta = msg.metadata
        deliveries = int(meta.num_delivered or 1)
        headers = dict(msg.headers or {})
        delivery = Delivery(subject=msg.subject, stream=self.stream,
                            stream_seq=int(meta.sequence.stream), deliveries=deliveries,
                            headers=headers)
        try:
            event = decode_with(self.decoder, msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            await self._dead_letter(msg, delivery, f"undecodable: {exc}")
            return
        misplaced = subjects.misplaced(event, msg.subject)
        if misplaced:
            # The broker lets only a subject's owner publish on it; an event whose content
            # belongs on another subject (a site claiming another site's worker, say) is a
            # forgery or a bug, and is never acted on.
            log.error("dead-lettering %s seq %d: %s", msg.subject, delivery.stream_seq,
                      misplaced)
            await self._dead_letter(msg, delivery, misplaced)
            return
        try:
            with telemetry.consumer_span(msg.subject, headers, consumer=self.durable,
                                         message_id=headers.get(MSG_ID), event=event):
                await self.handler(event, delivery)
        except asyncio.CancelledError:
            await _quiet(msg.nak())
            raise
        except Exception as exc:
            if deliveries >= self.max_deliver:
                log.warning("giving up on %s seq %d after %d deliveries: %s", msg.subject,
                            delivery.stream_seq, deliveries, exc)
                await self._dead_letter(msg, delivery, f"handler failed: {exc!r}")
            else:
                wait = self.backoff[min(deliveries - 1, len(self.backoff) - 1)]
                log.info("handler failed on %s (delivery %d), retry in %.1fs: %s",
                         msg.subject, deliveries, wait, exc)
                await _quiet(msg.nak(delay=wait))
            return
        self.processed += 1
        self.last_seq = max(self.last_seq, delivery.stream_seq)
        if not self._acks:
            self._acks_since = _clock()
        self._acks.append(msg)

    async def _dead_letter(self, msg: Msg, delivery: Delivery, error: str) -> None:
        # One report per stored message, whoever finds it: the id (the message id too) is
        # the stream and sequence, so a second consumer's report is a duplicate.
        wrapper = DeadLettered(
            id=f"dl-{self.stream}-{delivery.stream_seq}", at=now(),
            source=f"bus@{self.durable}", stream=self.stream, subject=msg.subject,
            consumer=self.durable, stream_seq=delivery.stream_seq,
            deliveries=delivery.deliveries, headers=delivery.headers,
            payload_b64=base64.b64encode(msg.data).decode(), error=error[:2000],
        )
        await self.bus.ensure(subjects.DEADLETTER_STREAM)
        await self.bus.publish(wrapper)
        self.dead_lettered += 1
        self.last_seq = max(self.last_seq, delivery.stream_seq)
        await _quiet(msg.ack())


async def _quiet(call: Awaitable[Any]) -> None:
    try:
        await call
    except Exception as exc:
        log.debug("ack/nak failed: %s", exc)
