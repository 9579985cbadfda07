"""Failover to the standby services (`cairn up --standby`), as `cairn up` runs them: the
lease TTL at its default (3 s), a secure federation.

- coordinator, kill: the active hub parent SIGKILLed; seconds from the signal to the
  standby answering the coordinator's health ping as ready (it answers nothing before it
  holds the lease, has replayed the streams and serves requests);
- coordinator, freeze: the same with SIGSTOP (the frozen one loses its lease by expiry);
- authority, kill: the active authority SIGKILLed; seconds until the standby holds the lease
  and a new connection is admitted (its first decision).

Each is run `ROUNDS` times, alternating which process is active; target: under 5 s.
`run()` returns the section for `tools/bench.py`; progress goes to stderr.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from cairn import subjects
from cairn.bus import Bus, Lease
from cairn.bus._lease import DEFAULT_TTL_S
from cairn.runtime.embedded import EmbeddedFederation

ROUNDS = 3
TARGET_S = 5.0


def _say(text: str) -> None:
    print(f"[scale_standby] {text}", file=sys.stderr, flush=True)


async def _answered_by(bus: Bus, service: str, pid: int, timeout: float = 30.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            reply = msgspec.json.decode(await bus.request(subjects.health(service, "hub"), b"",
                                                          timeout=0.2))
        except Exception:  # nobody answers during the failover
            reply = {}
        if reply.get("pid") == pid and reply.get("ready"):
            return time.monotonic() - t0
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{service} of pid {pid} never answered")


async def _coordinator_failover(fed: EmbeddedFederation, freeze: bool) -> float:
    bus = await fed.bus("bench-standby")
    try:
        record = await Lease(bus, "coordinator").current()
        assert record is not None
        active = next(p for p in fed.processes if p.proc.pid == record.pid)
        other = next(p for p in fed.processes if "coordinator" in p.services
                     and p is not active and p.proc.poll() is None)
        t0 = time.monotonic()
        os.kill(active.proc.pid, signal.SIGSTOP if freeze else signal.SIGKILL)
        await _answered_by(bus, "coordinator", other.proc.pid)
        took = time.monotonic() - t0
        if freeze:
            os.kill(active.proc.pid, signal.SIGCONT)  # it finds its lease gone and exits
        active.proc.wait(30)
        fed.respawn(active.name)  # what the supervisor does: back, as the standby
        return took
    finally:
        await bus.close()


async def _authority_failover(fed: EmbeddedFederation) -> float:
    bus = await fed.bus("bench-standby")
    try:
        record = await Lease(bus, "authority").current()
        assert record is not None
        active = next(p for p in fed.processes if p.proc.pid == record.pid)
        t0 = time.monotonic()
        os.kill(active.proc.pid, signal.SIGKILL)
        active.proc.wait(10)
        while True:  # a new connection is admitted: the standby decided it
            try:
                probe = await asyncio.wait_for(fed.bus("bench-probe"), 2.0)
                break
            except Exception:
                if time.monotonic() - t0 > 30:
                    raise
        took = time.monotonic() - t0
        await probe.close()
        fed.respawn(active.name)
        return took
    finally:
        await bus.close()


def _stats(values: list[float]) -> dict[str, Any]:
    return {"runs_s": [round(v, 3) for v in values],
            "median_s": round(statistics.median(values), 3),
            "max_s": round(max(values), 3), "target_s": TARGET_S,
            "met": max(values) < TARGET_S}


async def _measure(fed: EmbeddedFederation) -> dict[str, Any]:
    await fed.wait_healthy(60)
    out: dict[str, Any] = {"lease_ttl_s": DEFAULT_TTL_S, "rounds": ROUNDS}
    for label, freeze in (("coordinator_kill", False), ("coordinator_freeze", True)):
        runs = []
        for i in range(ROUNDS):
            runs.append(await _coordinator_failover(fed, freeze))
            _say(f"{label} {i + 1}/{ROUNDS}: {runs[-1]:.2f}s")
            await fed.wait_healthy(60)
        out[label] = _stats(runs)
    runs = []
    for i in range(ROUNDS):
        runs.append(await _authority_failover(fed))
        _say(f"authority_kill {i + 1}/{ROUNDS}: {runs[-1]:.2f}s")
        await asyncio.sleep(0.5)  # the respawned one reaches its lease wait
    out["authority_kill"] = _stats(runs)
    return out


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-standby-") as tmp:
        fed = EmbeddedFederation(dir=Path(tmp) / "fed", standby=True, heartbeat_s=0.5)
        fed.start()
        try:
            return asyncio.run(_measure(fed))
        finally:
            fed.stop()


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
