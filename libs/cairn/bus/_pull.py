"""Pull requests to one JetStream consumer, one at a time, each followed to its end.

nats-py's `fetch` can return while its request is still open at the server: a status that
was meant for an earlier request (a late 408 "Request Timeout") ends the wait of the next
one, which stays at the server for its whole expiry. A message the server hands to such a
request goes to an inbox that may be gone by then, and comes back only after `ack_wait`. A
stopped consumer could not know what was still open, so it could not wait for it.

Here one inbox carries one request at a time, and a request is over only when the server
says so: its batch delivered, or one status (404 "No Messages", 408 "Request Timeout", a
409 or 503 that ends it). What may still arrive is therefore known exactly. A stop leaves
an open request to the next instance of the consumer in the process, which takes the inbox
over; until then a follower keeps it, and gives back what nobody took.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError

from cairn.bus._connection import Bus

log = logging.getLogger("cairn.bus")
ANSWER_S = 5.0
"""How long a request for what is there now (no wait) may take to be answered."""
MARGIN_S = 2.0
"""A request the server never ends (its connection was lost) is presumed over this long after
its expiry."""
_ORPHANS: dict[tuple[int, str], Pulls] = {}
"""Stopped instances' inboxes whose request is still open, by connection and consumer."""
_FOLLOWERS: set[asyncio.Task[None]] = set()
HOLD_S = 1.0
"""How long what a stopped instance's request delivers waits for the next instance."""


class PullFailed(Exception):
    """The server ended a pull request with an error status."""

    def __init__(self, status: str, description: str) -> None:
        super().__init__(f"pull request ended with {status} {description}".strip())
        self.status = status
        self.description = description

    @property
    def consumer_gone(self) -> bool:
        """The consumer was deleted while the request waited (a 503, nobody answering, may
        also be a cluster electing the consumer's leader: that is retried more slowly)."""
        return self.status == "409" and "deleted" in self.description.lower()


@dataclass
class _Open:
    left: int
    """Messages the request may still deliver."""
    ends: float
    """Loop time by which it is presumed over when the server never said so."""


class Pulls:
    """One inbox and at most one open pull request on it."""

    def __init__(self, bus: Bus, *, stream: str, durable: str) -> None:
        self.bus = bus
        self.durable = durable
        self._next = f"{bus.js._prefix}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._key = (id(bus), self._next)
        self._sub: Any = None
        self._inbox = ""
        self._open: _Open | None = None
        self._kept: list[Msg] = []
        """Messages the open request delivered that nobody has handled yet."""
        self._handed = False
        """Whether the next instance took this stopped one's inbox over."""
        self._wake = asyncio.Event()
        """Ends a follower's wait: the inbox is taken over, or the connection closes."""
        self._follower: asyncio.Task[None] | None = None

    async def subscribe(self) -> None:
        """An inbox: a stopped instance's of the same consumer, with its open request and
        what that delivered, when this process has one; else a new one."""
        orphan = _ORPHANS.pop(self._key, None)
        if orphan is not None:
            orphan._handed = True
            orphan._wake.set()
            if orphan._follower is not None:
                await asyncio.wait({orphan._follower})
            if orphan._open is not None or orphan._kept:
                self._sub, self._inbox = orphan._sub, orphan._inbox
                self._open, self._kept = orphan._open, orphan._kept
                return
        self._inbox = self.bus.nc.new_inbox()
        self._sub = await self.bus.nc.subscribe(self._inbox, pending_msgs_limit=512 * 1024,
                                                pending_bytes_limit=256 * 1024 * 1024)

    async def pull(self, batch: int, *, wait: float | None = None,
                   stop: asyncio.Event | None = None) -> list[Msg]:
        """Up to `batch` messages: with `wait`, a long poll that ends at the first message
        (or its expiry, or `stop`: the request then stays open for `close`); without, what
        the consumer has now. A request taken over from a stopped instance is finished
        first, and what it brings is the answer."""
        got, self._kept = self._kept, []
        if got:
            return got
        if self._open is not None:
            got = await self._collect(stop)
            if got or self._open is not None:
                return got
        body: dict[str, Any] = {"batch": batch}
        if wait is None:
            body["no_wait"] = True
        else:
            body["expires"] = max(1, int(wait * 1e9) - 100_000)
        loop = asyncio.get_running_loop()
        self._open = _Open(left=batch, ends=loop.time() + (wait or ANSWER_S) + MARGIN_S)
        try:
            await self.bus.nc.publish(self._next, json.dumps(body).encode(), reply=self._inbox)
        except BaseException:
            self._open = None  # never sent (or not known to be): nothing to follow
            raise
        return await self._collect(stop)

    async def _collect(self, stop: asyncio.Event | None) -> list[Msg]:
        """What the open request delivers, to its end or to `stop`."""
        got: list[Msg] = []
        stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
        try:
            while self._open is not None:
                msg = self._take() or await self._wait(stopped)
                if msg is None:
                    if stop is None or not stop.is_set():
                        log.debug("consumer %s: a pull request was never ended; presumed "
                                  "over", self.durable)
                        self._open = None
                    break
                self._count(msg, got)
        finally:
            if stopped is not None:
                stopped.cancel()
        return got

    async def close(self) -> list[Msg]:
        """What the inbox holds now, for handling. A request still open is left to the next
        instance of this consumer in this process, which takes the inbox over; until one
        does, a follower keeps the inbox (`_follow`)."""
        got, self._kept = self._kept, []
        while self._open is not None and (msg := self._take()) is not None:
            with contextlib.suppress(PullFailed):
                self._count(msg, got)
        if self._open is None:
            await _quiet(self._sub.unsubscribe())
            return got
        self._handed = False
        self._wake.clear()
        if _ORPHANS.setdefault(self._key, self) is not self:
            log.debug("consumer %s: two stopped instances hold requests", self.durable)
        task = asyncio.create_task(self._follow(), name=f"pull-follow:{self.durable}")
        _FOLLOWERS.add(task)
        task.add_done_callback(_FOLLOWERS.discard)
        self._follower = task
        return got

    async def _follow(self) -> None:
        """Keep a stopped instance's inbox until its request ends, and hold what that
        delivers for the next instance of the consumer here, up to HOLD_S: a consumer
        restarted in the same process (a rebind, a service's restart) then gets it with its
        first delivery. What nobody takes is nak'd, for an instance anywhere. (A message
        nak'd at once could go to the next stopped instance's request, and be nak'd again:
        consumers stopped in a row spent a message's deliveries that way.)"""
        wake = asyncio.ensure_future(self._wake.wait())
        try:
            while self._open is not None and not wake.done():
                msg = self._take() or await self._wait(wake)
                if msg is None:
                    break
                with contextlib.suppress(PullFailed):  # the request's end either way
                    self._count(msg, self._kept)
            if self._kept and not wake.done():
                await asyncio.wait({wake}, timeout=HOLD_S)
        except ConnectionClosedError:
            self._open = None
        finally:
            wake.cancel()
            if not (self._handed and (self._open is not None or self._kept)):
                await self._give_back()

    async def _give_back(self) -> None:
        if _ORPHANS.get(self._key) is self:
            del _ORPHANS[self._key]
        kept, self._open, self._kept = self._kept, None, []
        for msg in kept:
            log.debug("consumer %s: nak'd stream message %s, handed over after a stop",
                      self.durable, msg.metadata.sequence.stream)
            await _quiet(msg.nak())
        await _quiet(self._sub.unsubscribe())

    def _count(self, msg: Msg, got: list[Msg]) -> None:
        assert self._open is not None
        status = _status(msg)
        if not status:
            got.append(msg)
            self._open.left -= 1
            if self._open.left <= 0:
                self._open = None
            return
        if status == "100":
            return  # a heartbeat: the request goes on
        self._open = None  # any other status is the request's last word
        if status not in ("404", "408"):  # no messages, or expired: an ordinary end
            raise PullFailed(status, (msg.headers or {}).get("Description", ""))

    def _take(self) -> Msg | None:
        queue: asyncio.Queue[Msg] = self._sub._pending_queue
        if queue.empty():
            return None
        return self._took(queue.get_nowait())

    def _took(self, msg: Msg) -> Msg:
        """`msg`, off the subscription's queue: nats-py's count of what it holds goes down
        (it drops messages past a limit on that count)."""
        self._sub._pending_size -= len(msg.data)
        return msg

    async def _wait(self, stopped: asyncio.Future[Any] | None) -> Msg | None:
        """The next message or status; None once `stopped` is done (what is queued stays
        there), or when the request is presumed over (then also when the connection was
        closed for good)."""
        assert self._open is not None
        loop = asyncio.get_running_loop()
        left = self._open.ends - loop.time()
        if left <= 0:
            return None
        queue: asyncio.Queue[Msg] = self._sub._pending_queue
        get = asyncio.ensure_future(queue.get())
        waits: set[asyncio.Future[Any]] = {get} if stopped is None else {get, stopped}
        await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        if not get.done():
            get.cancel()  # a cancelled get leaves its message in the queue
            await asyncio.wait({get})
        if not get.cancelled():
            return self._took(get.result())
        if stopped is not None and stopped.done():
            return None  # what is queued stays for `close`, or the instance taking over
        if self.bus.nc.is_closed:
            raise ConnectionClosedError
        return None


async def release(bus: Bus) -> None:
    """Before `bus` closes: what stopped consumers hold goes back (nak'd) at once, where the
    closed connection would leave it until ack_wait."""
    orphans = [o for o in _ORPHANS.values() if o.bus is bus]
    for orphan in orphans:
        orphan._wake.set()
    tasks = {o._follower for o in orphans if o._follower is not None}
    if tasks:
        await asyncio.wait(tasks, timeout=ANSWER_S)


def _status(msg: Msg) -> str:
    """The server's status on a request ('' for a stored message). A stored message always
    carries its ack subject; a status never does, so a publisher cannot forge one."""
    return "" if msg.reply else (msg.headers or {}).get("Status", "")


async def _quiet(call: Any) -> None:
    try:
        await call
    except Exception as exc:
        log.debug("pull inbox: %s", exc)
