"""The supervisor's watchdog: a parent that is alive but stops answering health is hung.

A process that exits is noticed by `poll()`; one that is frozen (SIGSTOP), deadlocked or
starved answers nothing, yet looks alive. Every `every_s` the watchdog pings each parent's
own services (`cairn.health.<service>.<site>`) and names the parents none of whose services
answered for `hang_s`: the supervisor kills them, and restarts them as it does any parent
that died.

A leased service (coordinator, validator, signer) is left out: it answers only while its
process holds its lease, so silence there may be a standby waiting. A hung holder of a lease
loses it by expiry instead (`cairn.runtime.standby`), and a process that runs nothing but
leased services is watched through its lease, not here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn import subjects
from cairn.runtime.standby import LEASED

if TYPE_CHECKING:
    from cairn.bus import Bus
    from cairn.runtime.embedded import EmbeddedFederation

HANG_S = 15.0
"""Silence, in seconds, after which a running parent is taken for hung (a loaded machine's
slowest start is well within it: a parent is watched from its first answer on)."""

EVERY_S = 2.0
PING_S = 1.0


@dataclass
class Watchdog:
    """Finds the parents of `fed` that are alive but answer no health ping.

    Args:
        fed: A started federation.
        hang_s: See `HANG_S`.
        every_s: Seconds between rounds of pings.
        clock: Monotonic seconds.
    """

    fed: EmbeddedFederation
    hang_s: float = HANG_S
    every_s: float = EVERY_S
    clock: Callable[[], float] = time.monotonic
    _answered_at: dict[int, float] = field(default_factory=dict)
    """Pid -> when one of its services last answered (absent: never yet, so not watched)."""
    _next_at: float = 0.0

    def _watched(self) -> dict[int, list[tuple[str, str]]]:
        out = {}
        for p in self.fed.processes:
            if p.proc.poll() is not None:
                continue
            pairs = [(svc, site) for site in (p.site, *p.more_sites) for svc in p.services
                     if svc not in LEASED]
            if pairs:
                out[p.proc.pid] = pairs
        return out

    async def sweep(self, bus: Bus) -> list[str]:
        """One round: the names of the parents hung now (each named once per hang)."""
        watched = self._watched()

        async def answers(pairs: list[tuple[str, str]]) -> bool:
            for svc, site in pairs:
                try:
                    await bus.request(subjects.health(svc, site), b"", timeout=PING_S)
                    return True
                except Exception:  # no answer: try its next service
                    continue
            return False

        results = await asyncio.gather(*(answers(pairs) for pairs in watched.values()))
        now = self.clock()
        hung: list[str] = []
        for pid, ok in zip(watched, results, strict=True):
            if ok:
                self._answered_at[pid] = now
            elif pid in self._answered_at and now - self._answered_at[pid] >= self.hang_s:
                del self._answered_at[pid]
                hung += [p.name for p in self.fed.processes if p.proc.pid == pid]
        for pid in set(self._answered_at) - set(watched):
            del self._answered_at[pid]  # gone: its successor is watched afresh
        return hung

    def hung(self) -> list[str]:
        """`sweep` on its own connection, at most every `every_s` (the supervisor's loop)."""
        now = self.clock()
        if now < self._next_at:
            return []
        self._next_at = now + self.every_s

        async def one_round() -> list[str]:
            try:
                bus = await asyncio.wait_for(self.fed.bus("cairn-watchdog"), 5.0)
            except Exception:  # the bus is down: the supervisor sees to it, not to parents
                return []
            try:
                return await self.sweep(bus)
            finally:
                await bus.close()

        return asyncio.run(one_round())
