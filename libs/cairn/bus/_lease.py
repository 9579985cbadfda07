"""Leases: one active holder per service kind, kept in the KV bucket `leases`.

A federation may run a standby coordinator (and validator, signer, authority) beside the
active one. Both ask for the same key; JetStream's expected-last-sequence check lets exactly
one `create` win, and the bucket's max age removes a key nobody renewed, so a holder that
died or froze (SIGSTOP, a stuck event loop) loses its lease by expiry, with no clock shared
between the two. The winner's *term* is the KV revision its create got: every later holder's
term is larger, and every decision a holder publishes carries its term (`LEASE_HEADER`), so
the stream's history shows who acted under which lease.

A holder acts only while `valid()`: no longer than the bucket's TTL, less a margin, after the
last renewal the server confirmed was *sent*. CLOCK_MONOTONIC goes on counting while a
process is stopped, so a holder thawed after its TTL sees at once that it may not act,
before its first renewal is even refused; that refusal (the server's, by revision) is what
makes it lost.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import msgspec
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)

from cairn.bus._connection import Bus
from cairn.errors import Unavailable
from cairn.subjects import KV_LEASES

log = logging.getLogger("cairn.bus.lease")

LEASE_HEADER = "Cairn-Lease"
"""`<service>:<term>` on every event a leased service publishes."""

DEFAULT_TTL_S = 3.0
"""How long a lease outlives its holder's last renewal (the failover time's main part)."""

SETUP_S = 60.0
"""How long finding (or making) the lease bucket may wait on a JetStream that does not answer
yet (a cluster electing its leader at start, a server restarting)."""

RETRY_S = 0.5
"""How soon a renewal that failed is tried again."""

MARGIN = 0.25
"""The share of the TTL a holder gives up early: it stops acting before the key expires."""


class LeaseLost(Unavailable):
    """The lease this service held is gone (expired, or another holder has it): the process
    exits, and its supervisor starts it again as a standby."""


class LeaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The value of a lease key: who holds it (for operators; the term is the revision)."""

    holder: str
    pid: int
    host: str


def holder_name(service: str) -> str:
    return f"{service}@{socket.gethostname()}:{os.getpid()}"


class Lease:
    """One service kind's lease, asked for, kept and given back by one process.

    Args:
        bus: A connection whose identity may write `$KV.leases.<service>`.
        service: The key (the service kind: `coordinator`, `validator`, ...).
        ttl_s: The bucket's TTL when this call creates the bucket; an existing bucket's TTL
            wins (every holder must agree on it).
        clock: Monotonic seconds (a parameter so validity can be tested without waiting).
    """

    def __init__(self, bus: Bus, service: str, *, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bus = bus
        self.service = service
        self.ttl_s = ttl_s
        self.clock = clock
        self.term = 0
        """The KV revision of this holder's create (0: not held)."""
        self.revision = 0
        self.record = LeaseRecord(holder=holder_name(service), pid=os.getpid(),
                                  host=socket.gethostname())
        self.lost = asyncio.Event()
        self._valid_until = 0.0
        self._kv: Any = None

    async def _bucket(self) -> Any:
        if self._kv is None:
            # A new cluster may still be electing its JetStream leader: ask again meanwhile.
            self._kv = await self.bus._retry(self._find_or_make_bucket, budget=SETUP_S,
                                             what=f"the lease bucket {KV_LEASES}")
            status = await self._kv.status()
            if status.ttl:
                self.ttl_s = float(status.ttl)
        return self._kv

    async def _find_or_make_bucket(self) -> Any:
        try:
            return await self.bus.js.key_value(KV_LEASES)
        except (BucketNotFoundError, NotFoundError):
            return await self.bus.js.create_key_value(
                bucket=KV_LEASES, history=1, ttl=self.ttl_s, replicas=self.bus.replicas,
                description="one active holder per service kind (standby services)")

    @property
    def held(self) -> bool:
        return self.term > 0 and not self.lost.is_set()

    def valid(self) -> bool:
        """Whether this holder may act now (see the module's docstring)."""
        return self.held and self.clock() < self._valid_until

    def headers(self) -> dict[str, str]:
        """The headers a decision carries; raises `LeaseLost` when this holder may not act.

        Raises:
            LeaseLost: the lease expired or was never held.
        """
        if not self.valid():
            # Not valid now is not lost yet: a starved holder whose key nobody replaced gets
            # it back at its next renewal; until then it does not act.
            raise LeaseLost(f"the {self.service} lease is not valid in this process now")
        return {LEASE_HEADER: f"{self.service}:{self.term}"}

    def lose(self, why: str) -> None:
        """This holder learnt that it lost the lease otherwise than at a renewal (a later
        term fenced it out, `Fence`): it acts no more, and its process stops."""
        self._lose(why)

    def _lose(self, why: str) -> None:
        if not self.lost.is_set():
            log.error("%s lost its lease (term %d): %s", self.service, self.term, why)
            self.lost.set()

    async def try_acquire(self) -> bool:
        """One attempt at the lease; True when this process holds it now."""
        kv = await self._bucket()
        sent = self.clock()
        try:
            rev = await kv.create(self.service, msgspec.json.encode(self.record))
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            # KeyNotFound: the holder's key expired between nats-py's create and the read it
            # makes after a refused one. Free now: the next attempt may take it.
            return False
        self.term = self.revision = int(rev)
        self._valid_until = sent + self.ttl_s * (1 - MARGIN)
        log.info("%s holds its lease (term %d, ttl %.2fs)", self.service, self.term,
                 self.ttl_s)
        return True

    async def acquire(self, stop: asyncio.Event | None = None, *,
                      until: float | None = None) -> bool:
        """Wait until this process holds the lease (True), or `stop` is set or the event
        loop's clock passes `until` (False; asked at least once)."""
        said = False
        loop = asyncio.get_running_loop()
        while stop is None or not stop.is_set():
            try:
                if await self.try_acquire():
                    return True
            except (Unavailable, TimeoutError, OSError) as exc:
                log.warning("asking for the %s lease: %s", self.service, exc)
            except Exception as exc:  # nats' own errors while the server restarts
                log.warning("asking for the %s lease: %s", self.service, exc)
            if until is not None and loop.time() >= until:
                break
            if not said:
                current = await self.current()
                log.info("%s waits behind the lease held by %s", self.service,
                         current.holder if current else "(nobody, just now)")
                said = True
            await _wait(stop, self.ttl_s / 6)
        return False

    async def current(self) -> LeaseRecord | None:
        """Who holds the lease now (None: nobody)."""
        kv = await self._bucket()
        try:
            entry = await kv.get(self.service)
        except (KeyNotFoundError, NotFoundError):
            return None
        try:
            return msgspec.json.decode(entry.value or b"", type=LeaseRecord)
        except msgspec.DecodeError:
            return None

    async def renew(self) -> None:
        """Renew once (a revision-checked update: only the holder of the last revision can).

        The server decides, not this process's clock: the update succeeds only while the key
        still holds this holder's last revision, which an expiry or another holder's create
        would have changed. So a holder that was starved past its validity (and did not act
        meanwhile) but whose key nobody replaced is valid again; one that was replaced is not.

        Raises:
            LeaseLost: somebody else holds it now, or it expired.
        """
        if not self.held:
            raise LeaseLost(f"the {self.service} lease is not held")
        kv = await self._bucket()
        sent = self.clock()
        try:
            rev = await kv.update(self.service, msgspec.json.encode(self.record),
                                  last=self.revision)
        except KeyWrongLastSequenceError:
            self._lose("another holder has it, or it expired")
            raise LeaseLost(f"the {self.service} lease has another holder") from None
        self.revision = int(rev)
        self._valid_until = sent + self.ttl_s * (1 - MARGIN)

    async def keep(self) -> None:
        """Renew every third of the TTL until lost (then `lost` is set and this returns); after
        a renewal that failed (a dropped connection, a bucket electing its leader), again
        within `RETRY_S`, so that the first renewal the bucket can take is made at once
        rather than a third of the TTL later, when the key may have expired."""
        wait = self.ttl_s / 3
        while not self.lost.is_set():
            await asyncio.sleep(wait)
            try:
                await self.renew()
            except LeaseLost:
                return
            except Exception as exc:  # not acting meanwhile (`valid`), and asking again soon
                log.warning("renewing the %s lease: %s", self.service, exc)
                wait = min(self.ttl_s / 3, RETRY_S)
            else:
                wait = self.ttl_s / 3

    async def release(self) -> None:
        """Give the lease back at a clean stop, so a standby takes over at once."""
        if not self.held:
            return
        self.lost.set()
        try:
            kv = await self._bucket()
            await kv.delete(self.service, last=self.revision)
        except Exception as exc:  # expired or taken meanwhile: nothing to give back
            log.info("giving back the %s lease: %s", self.service, exc)


async def _wait(stop: asyncio.Event | None, seconds: float) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
