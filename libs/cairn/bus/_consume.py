"""Durable pull consumers: explicit ack, bounded redelivery with backoff, dead letters.

A handler that raises is retried (nak with a delay from the backoff list) until the last
delivery; then the message is wrapped in a `DeadLettered` event on `cairn.deadletter.<stream>`
and acked, so one poison message never blocks the ones behind it. A message that cannot be
decoded at all is dead-lettered at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
from nats.aio.msg import Msg
from nats.js import api
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from cairn import subjects, telemetry
from cairn.bus._connection import MSG_ID, Bus
from cairn.events import DeadLettered, now
from cairn.events.decoding import decode_with

log = logging.getLogger("cairn.bus")
_STOPPING = {api.Header.STATUS.value: "499", api.Header.DESCRIPTION.value: "consumer stopping"}
"""The status a stopping consumer hands its own poll to end it."""
_SHORT_PULL = 0.005
"""How long a pull for a backlog waits (seconds): what is there, at once."""
_STRAY_MARGIN = 2.0
"""How long after a pull request's expiry a stopped consumer still expects deliveries for it
(the server counts the expiry from when it took the request)."""
_STRAY_CATCHERS: set[asyncio.Task[None]] = set()
T = TypeVar("T")


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
        self._psub: Any = None
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._requests_end = 0.0
        """When (loop time) the last pull request sent expires at the server."""

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
        js = self.bus.js
        try:
            await js.add_consumer(self.stream, self._config())
        except Exception as exc:
            log.debug("add_consumer %s/%s: %s", self.stream, self.durable, exc)
        self._psub = await js.pull_subscribe_bind(durable=self.durable, stream=self.stream)

    async def start(self) -> None:
        await self.bus._retry(self._bind, what=f"consumer {self.stream}/{self.durable}")
        self._task = asyncio.create_task(self._run(), name=f"consume:{self.durable}")

    async def stop(self) -> None:
        """Stop fetching, finish and ack what is in flight, then unsubscribe."""
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        if self._psub is not None:
            try:
                await self._psub.unsubscribe()
            except Exception:
                pass
            self._psub = None

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def _run(self) -> None:
        delay = 0.05
        more = False
        while not self._stopping.is_set():
            try:
                msgs = await self._next_batch(more)
            except TimeoutError:
                more = False
                continue
            except NotFoundError:
                await self._rebind()
                continue
            except Exception as exc:
                more = False
                if self._stopping.is_set():
                    break
                if "timeout" in type(exc).__name__.lower():
                    continue
                # The consumer may be gone (deleted: its pulls get no responder, or a 409):
                # look, and make it again if so.
                log.debug("fetch on %s failed: %s", self.durable, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                await self._rebind()
                continue
            delay = 0.05
            # A full batch hints at a backlog: drain it before waiting again.
            more = len(msgs) >= (self.batch if more else 1)
            await self._handle_batch(msgs)
        if self._psub is not None:
            # What came after a short pull ended (or while the last batch was handled) waits
            # in the subscription's queue: handled too, not left to come back after ack_wait.
            await self._handle_batch(await self._withdraw())

    async def _handle_batch(self, msgs: list[Msg]) -> None:
        self._idle.clear()
        try:
            # Everything fetched is handled and acked, even when a stop arrives meanwhile.
            # The server applies acks on its own queue, after answering a flush; when
            # stopping, the batch's last ack waits for the server's confirmation, so a
            # stopped consumer shows nothing pending that it has handled.
            last = len(msgs) - 1
            for i, msg in enumerate(msgs):
                await self._handle(msg, last=i == last)
            await self.bus.nc.flush(timeout=5)
        except Exception as exc:
            log.debug("flush after batch failed: %s", exc)
        finally:
            self._idle.set()

    async def _next_batch(self, backlog: bool) -> list[Msg]:
        """The next messages to handle.

        A pull for N messages that gets fewer stays open until it expires, so waiting for a
        batch would hold a lone message back for up to `fetch_timeout`. Idle, we long-poll
        for one message (it is handed over the moment it arrives); with a backlog we take
        what is there in one short pull.
        """
        loop = asyncio.get_running_loop()
        if backlog:
            self._requests_end = max(self._requests_end, loop.time() + _SHORT_PULL)
            msgs: list[Msg] = await self._psub.fetch(self.batch, timeout=_SHORT_PULL)
            return msgs
        self._requests_end = max(self._requests_end, loop.time() + self.fetch_timeout)
        return await self._long_poll()

    async def _long_poll(self) -> list[Msg]:
        """One message, waited for up to `fetch_timeout`, or what a stop leaves.

        A stop does not wait for the poll to run out (it was a second of every service's
        stop): it ends the poll's wait, and what the server handed over until then is
        handled and acked like any batch; what it hands over later is nak'd
        (`_catch_strays`), for the next instance to take at once.
        """
        assert self._psub is not None
        poll = asyncio.ensure_future(self._psub.fetch(1, timeout=self.fetch_timeout))
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            poll.cancel()
            raise
        finally:
            stopped.cancel()
        if not self._stopping.is_set():
            msgs: list[Msg] = await poll  # raises what the fetch raised, as before
            return msgs
        sub = self._psub._sub
        if not poll.done():
            # Not cancelled: a cancel racing a message handed to the poll would drop it
            # (nats-py takes it off the queue in a task of its own). A status of our own
            # behind whatever the server delivered ends the wait (as an error: a timeout
            # status would only make it wait on).
            with contextlib.suppress(asyncio.QueueFull):  # full: the poll has its message
                sub._pending_queue.put_nowait(Msg(self.bus.nc, subject=sub._subject,
                                                  headers=dict(_STOPPING)))
        await asyncio.wait({poll})
        if poll.exception():  # ended by our status: its request is still open at the server
            return await self._withdraw(open_poll=True)
        return list(poll.result()) + await self._withdraw()

    async def _withdraw(self, *, open_poll: bool = False) -> list[Msg]:
        """Take the messages waiting in the subscription's queue, and leave the inbox to
        `_catch_strays` until the server's last pull request surely ended (`open_poll`: a
        long poll for one message that the stop cut short)."""
        assert self._psub is not None
        psub, self._psub = self._psub, None
        queue = psub._sub._pending_queue
        got: list[Msg] = []
        while not queue.empty():
            msg = queue.get_nowait()
            if not JetStreamContext.is_status_msg(msg):  # a poll's end (408) and such
                got.append(msg)
        task = asyncio.create_task(self._catch_strays(psub, self._requests_end, open_poll),
                                   name=f"strays:{self.durable}")
        _STRAY_CATCHERS.add(task)
        task.add_done_callback(_STRAY_CATCHERS.discard)
        return got

    async def _catch_strays(self, psub: Any, requests_end: float, open_poll: bool) -> None:
        """Nak what the server still hands over after a stop, so it is redelivered at once.

        JetStream cannot withdraw a pull request, and it delivers from a queue of its own: a
        message it picked for the request just before an unsubscribe reached it would go to
        an inbox nobody reads and come back only after `ack_wait`. So the inbox stays until
        the request has ended at the server (a status says so, or one message for a poll
        of one; else its expiry passed, with a margin for the server's own delay), and what
        arrives there is nak'd, for the consumer's next instance to take.
        """
        loop = asyncio.get_running_loop()
        queue = psub._sub._pending_queue
        try:
            while (left := requests_end + _STRAY_MARGIN - loop.time()) > 0:
                try:
                    msg = await asyncio.wait_for(queue.get(), timeout=left)
                except TimeoutError:
                    break
                if JetStreamContext.is_status_msg(msg):
                    break  # the request's end: expired, or the consumer is gone
                log.debug("consumer %s: nak'd a message handed over after its stop",
                          self.durable)
                await _quiet(msg.nak())
                if open_poll:
                    break  # the poll's one message: its request is over
        finally:
            await _quiet(psub.unsubscribe())

    async def _rebind(self) -> None:
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

    async def _handle(self, msg: Msg, *, last: bool = False) -> None:
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
        # Whether a stop came is asked now, not before the handler ran: a stop that arrives
        # while the batch's last message is handled gets that ack confirmed too.
        confirm = last and self._stopping.is_set()
        await _quiet(msg.ack_sync(timeout=5) if confirm else msg.ack())

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
