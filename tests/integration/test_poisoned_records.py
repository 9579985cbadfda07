"""Poisoned records never stop a service: garbage left where services read their start state
(the last snapshot record, a launch record, a heartbeat entry) is skipped, dead-lettered and
reported, and a later `cairn up` in the same directory comes up healthy."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from cairn import subjects
from cairn.bus import replay
from cairn.events import DEADLETTER_DECODER, FEDERATION_DECODER, RecordSkipped
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.federation import make_federation

GARBAGE = b"\xff not an event {"


async def _poison(fed: EmbeddedFederation) -> None:
    """Garbage in the stores, each written by the one identity the broker lets write it."""
    assert fed.nats is not None
    bus = await fed.bus(kit="site-a")
    try:
        # Wait for site-a's first snapshot, so the garbage is the last record, not the only one.
        deadline = time.monotonic() + 60
        while await bus.last_message(subjects.FEDERATION_STREAM.name,
                                     subjects.site_event("site-a", "snapshot")) is None:
            assert time.monotonic() < deadline, "site-a never recorded a snapshot"
            await asyncio.sleep(0.2)
        await bus.publish_bytes(subjects.site_event("site-a", "snapshot"), GARBAGE,
                                msg_id="poison-snapshot")
        launches = await bus.js.key_value(subjects.kv_launches("site-a"))
        await launches.put("demo.poison.client.0", b'{"launch_id": 7}')
    finally:
        await bus.close()
    # The hub's own heartbeat record, once its parent (whose agent would overwrite it) is
    # gone; the coordinator reads the records before that agent starts again. Stopped, not
    # killed: a killed parent's lease would hold the next coordinator back for its TTL,
    # while the agent beside it starts at once and overwrites the record.
    parent = fed.process("coordinator").proc
    parent.terminate()
    parent.wait(30)
    hub = await fed.bus(kit=fed.hub)
    try:
        sites = await hub.js.key_value(subjects.KV_SITES)
        await sites.put(fed.hub, b"[1, 2, 3]")
    finally:
        await hub.close()


async def _reports(fed: EmbeddedFederation) -> tuple[list[RecordSkipped], list[str]]:
    bus = await fed.bus()
    try:
        skipped = [r.event async for r in replay(bus, subjects.FEDERATION_STREAM.name,
                                                 FEDERATION_DECODER)
                   if isinstance(r.event, RecordSkipped)]
        letters = [r.event.subject async for r in replay(bus, subjects.DEADLETTER_STREAM.name,
                                                         DEADLETTER_DECODER)
                   if r.event is not None]
        return skipped, letters
    finally:
        await bus.close()


async def test_poisoned_start_records_are_skipped_and_cairn_up_comes_up(
        tmp_path: Path) -> None:
    fed = make_federation(tmp_path)
    fed.start()
    try:
        await fed.wait_healthy(90)
        await _poison(fed)
    finally:
        fed.stop()
    assert fed.dir.is_dir()

    # A clean `cairn up` in the same directory: today's bug made this exit non-zero.
    env = {**os.environ, "CAIRN_CONTEXT": str(tmp_path / "context.yaml")}
    env.pop("CAIRN_NATS_URL", None)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cairn", "up", "--dir", str(fed.dir), "--check",
         "--timeout", "120", *([] if fed.secure else ["--insecure"])],
        capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "healthy:" in done.stdout

    # Its stores hold the reports: start the federation once more to read them.
    fed.start()
    try:
        await fed.wait_healthy(90)
        skipped, letters = await _reports(fed)
    finally:
        fed.stop()
    by_service = {(s.service, s.site): s for s in skipped}
    snap = by_service[("snapshotter", "site-a")]
    assert snap.key == subjects.site_event("site-a", "snapshot") and snap.seq > 0
    assert by_service[("launcher", "site-a")].key == "demo.poison.client.0"
    assert by_service[("coordinator", "hub")].store == f"KV_{subjects.KV_SITES}"
    assert subjects.site_event("site-a", "snapshot") in letters
    # KV dead letters name the entry's own subject: a redrive writes the entry back.
    assert f"$KV.{subjects.kv_launches('site-a')}.demo.poison.client.0" in letters
    assert f"$KV.{subjects.KV_SITES}.hub" in letters
