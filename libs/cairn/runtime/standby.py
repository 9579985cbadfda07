"""Standby services: a federation service starts only while its process holds its lease.

The coordinator, validator and signer are each once per federation. Any number of processes
may run them (`cairn up --standby` runs a second hub parent); each service kind waits behind
its lease (`cairn.bus.Lease`) before it folds a stream or answers a request, so exactly one
instance is active. When the active one dies or freezes, its lease expires and a standby
takes it, replays the streams, and carries on; a process that finds its lease gone (it was
frozen, or starved past the TTL) exits for its supervisor to start it again, as a standby.

Until it holds its lease a service answers no health ping: the health subject names the
service and its site, and whoever answers it is the active instance.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from cairn.bus import Lease
from cairn.bus._lease import DEFAULT_TTL_S
from cairn.errors import InvalidInput

if TYPE_CHECKING:
    from cairn.runtime.service import Runtime, Service, ServiceConfig

log = logging.getLogger("cairn.runtime.standby")

LEASED = frozenset({"coordinator", "validator", "signer"})
"""The service kinds that run once per federation, so behind a lease."""

TTL_ENV = "CAIRN_LEASE_TTL_S"
FIRST_WAIT_TTLS = 1.5
"""At start, how many TTLs a process waits for its leases (all together) before its
services stand by."""


def lease_ttl(config: ServiceConfig) -> float:
    """The lease TTL asked for: `-O lease_ttl_s=`, else `$CAIRN_LEASE_TTL_S`, else 3 s.

    Raises:
        InvalidInput: not a number of seconds between 0.5 and 300.
    """
    raw = config.options.get("lease_ttl_s") or os.environ.get(TTL_ENV) or str(DEFAULT_TTL_S)
    try:
        ttl = float(raw)
    except ValueError:
        raise InvalidInput(f"lease_ttl_s: {raw!r} is not a number of seconds",
                           field="lease_ttl_s") from None
    if not 0.5 <= ttl <= 300:
        raise InvalidInput(f"lease_ttl_s: {ttl:g} is outside 0.5..300 seconds",
                           field="lease_ttl_s")
    return ttl


class Standby:
    """The leases of one process's leased services, and what starts each once it is held.

    Args:
        runtime: The process's runtime (its bus; `runtime.leases` is filled in).
        begin: Starts one service (fold, consume, serve health) once its lease is held.
        ttl_s: See `lease_ttl`.
    """

    def __init__(self, runtime: Runtime, begin: Callable[[Service], Awaitable[None]],
                 ttl_s: float) -> None:
        self.runtime = runtime
        self.begin = begin
        self.ttl_s = ttl_s
        self.lost = asyncio.Event()
        """Set when a lease this process held is gone: the process must exit."""
        self._deadline: float | None = None

    async def start(self, service: Service, stop: asyncio.Event) -> None:
        """Start `service` now if its lease is free or frees within about one TTL (the
        holder was stopped uncleanly: its lease expires unrenewed), else wait for it in the
        background.

        Waiting that long first keeps a restart in order: the service reads its start state
        before the services started after it in this process (the hub's agent, whose first
        heartbeat rewrites a record the coordinator reads) begin.
        """
        lease = Lease(self.runtime.bus, service.name, ttl_s=self.ttl_s)
        self.runtime.leases[service.name] = lease
        loop = asyncio.get_running_loop()
        if self._deadline is None:  # one wait for all of this process's leases
            self._deadline = loop.time() + self.ttl_s * FIRST_WAIT_TTLS
        if await lease.acquire(stop, until=self._deadline):
            await self._begin(service, lease)
        else:
            self.runtime.spawn(self._wait(service, lease, stop), f"standby-{service.name}")

    async def _wait(self, service: Service, lease: Lease, stop: asyncio.Event) -> None:
        if await lease.acquire(stop):
            log.info("%s: taking over (term %d); rebuilding its state by replay",
                     service.name, lease.term)
            await self._begin(service, lease)

    async def _begin(self, service: Service, lease: Lease) -> None:
        self.runtime.spawn(self._keep(lease), f"lease-{service.name}")
        await self.begin(service)

    async def _keep(self, lease: Lease) -> None:
        await lease.keep()
        self.lost.set()

    async def release(self) -> None:
        """Give back every lease held (a clean stop: a standby takes over at once)."""
        await asyncio.gather(*(lease.release() for lease in self.runtime.leases.values()),
                             return_exceptions=True)
