"""A lease renewal that failed (a bucket electing its leader) is tried again within half a
second, not a third of the TTL later, when on a cluster the key may have expired meanwhile;
and a key that expires while it is being taken is one more try, not a crash."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cairn.bus import _lease
from cairn.bus._lease import RETRY_S, Lease, LeaseLost


class Flaky(Lease):
    def __init__(self, outcomes: list[str]) -> None:
        super().__init__(bus=None, service="coordinator", ttl_s=30.0)  # type: ignore[arg-type]
        self.outcomes = outcomes

    async def renew(self) -> None:
        outcome = self.outcomes.pop(0)
        if outcome == "down":
            raise _lease.Unavailable("nats: no response from stream")
        if outcome == "lost":
            self.lost.set()
            raise LeaseLost("taken")


async def test_a_failed_renewal_is_retried_soon_and_the_cadence_comes_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def sleep(seconds: float, *_: Any) -> None:
        waits.append(seconds)

    monkeypatch.setattr(_lease.asyncio, "sleep", sleep)
    lease = Flaky(["ok", "down", "down", "ok", "ok", "lost"])
    await asyncio.wait_for(lease.keep(), 5)
    assert waits == [10.0, 10.0, RETRY_S, RETRY_S, 10.0, 10.0]


class ExpiringKV:
    """nats-py's `create` when the holder's key expires between its refused put and the
    read it then makes."""

    async def create(self, key: str, value: bytes) -> int:
        from nats.js.errors import KeyNotFoundError

        raise KeyNotFoundError


async def test_a_key_that_expires_while_it_is_being_taken_is_another_try_not_a_crash() -> None:
    lease = Lease(bus=None, service="coordinator")  # type: ignore[arg-type]
    lease._kv = ExpiringKV()
    assert await lease.try_acquire() is False
    assert not lease.held
