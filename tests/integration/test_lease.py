"""Leases on a real nats-server: one holder at a time, a lease nobody renews expires, and a
holder whose time ran out (frozen: its monotonic clock jumped) may not act nor renew."""

from __future__ import annotations

import asyncio

import pytest

from cairn.bus import LEASE_HEADER, Bus, Lease, LeaseLost

TTL_S = 0.6


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_one_holder_then_the_next_after_expiry_with_a_larger_term(bus: Bus) -> None:
    # The first one's clock stands still: it believes its lease valid, so only the server's
    # revision check can tell it that it is not.
    first = Lease(bus, "coordinator", ttl_s=TTL_S, clock=Clock())
    second = Lease(bus, "coordinator")
    assert await first.try_acquire()
    assert not await second.try_acquire()
    assert second.ttl_s == TTL_S  # the bucket's TTL, whatever the second one asked for
    record = await second.current()
    assert record is not None and record.holder == first.record.holder
    # Nobody renews the first: the server removes the key after the TTL, and the standby
    # that waits behind it gets it.
    assert await asyncio.wait_for(second.acquire(), 10 * TTL_S)
    assert second.term > first.term
    assert second.headers() == {LEASE_HEADER: f"coordinator:{second.term}"}
    assert first.valid()
    with pytest.raises(LeaseLost):
        await first.renew()  # a revision-checked update: the old holder cannot
    assert not first.valid() and (await second.current()) == second.record


async def test_a_frozen_holder_may_not_act_and_loses_the_lease(bus: Bus) -> None:
    clock = Clock()
    lease = Lease(bus, "validator", ttl_s=TTL_S, clock=clock)
    assert await lease.try_acquire()
    assert lease.valid()
    await lease.renew()  # renewed in time: still the holder
    clock.t += TTL_S  # what SIGSTOP past the TTL looks like to the thawed process
    assert not lease.valid()
    with pytest.raises(LeaseLost):
        lease.headers()
    # Starved, but nobody took its key (the server kept its revision): valid again.
    await lease.renew()
    assert lease.valid() and not lease.lost.is_set()
    # Frozen for real past the TTL: the key expired and a standby has it; the thawed one may
    # not act, and its renewal is refused by the server.
    clock.t += TTL_S
    standby = Lease(bus, "validator")
    assert await asyncio.wait_for(standby.acquire(), 10 * TTL_S)
    assert not lease.valid()
    with pytest.raises(LeaseLost):
        await lease.renew()
    assert lease.lost.is_set()


async def test_kept_lease_is_not_taken_and_a_release_hands_it_over_at_once(bus: Bus) -> None:
    holder, standby = Lease(bus, "signer", ttl_s=TTL_S), Lease(bus, "signer")
    assert await holder.try_acquire()
    keeper = asyncio.create_task(holder.keep())
    try:
        waiting = asyncio.create_task(standby.acquire())
        done, _ = await asyncio.wait({waiting}, timeout=4 * TTL_S)
        assert not done, "the standby took a lease that was being renewed"
        await holder.release()
        assert await asyncio.wait_for(waiting, TTL_S)  # well before any expiry
    finally:
        keeper.cancel()
