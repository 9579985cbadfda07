"""The snapshotter in-process over a real nats-server: a snapshot on start and on request,
drift against the snapshot before (also across a restart), large snapshots in the object store.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cairn import subjects
from cairn.bus import Bus, replay
from cairn.events import FEDERATION_DECODER, SnapshotRecorded
from cairn.runtime import service
from cairn.runtime.natsserver import NatsServer
from cairn.runtime.service import ServiceConfig

SITE = "site-x"
RACK = "Site.location.rack"


@asynccontextmanager
async def snapshotter(url: str, **options: str) -> AsyncIterator[None]:
    """Run the snapshotter service (as `cairn run snapshotter` would) until the block ends."""
    stop = asyncio.Event()
    config = ServiceConfig(nats_url=url, site=SITE, options=dict(options))
    task = asyncio.create_task(service.run(["snapshotter"], config, stop))
    try:
        yield
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 15) == 0


async def wait_event(bus: Bus, verb: str, pred: Callable[[Any], bool],
                     timeout: float = 20.0) -> Any:
    """The first `site.<verb>` event of SITE that satisfies `pred` (polled, bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async for r in replay(bus, subjects.FEDERATION_STREAM.name, FEDERATION_DECODER,
                              filters=[subjects.site_event(SITE, verb)]):
            if r.event is not None and pred(r.event):
                return r.event
        await asyncio.sleep(0.1)
    raise AssertionError(f"no matching {verb} event within {timeout}s")


# The request as any client writes it on the wire (schemas/api/envelope.json).
SNAPSHOT_REQUEST = b'{"request": {"type": "snapshot"}}'


async def ask(bus: Bus) -> SnapshotRecorded:
    data = await bus.request(subjects.site_snapshot_request(SITE), SNAPSHOT_REQUEST, timeout=30)
    reply = msgspec.json.decode(data)
    assert reply["ok"], reply
    assert reply["result"]["type"] == "snapshot"
    event = FEDERATION_DECODER.decode(msgspec.json.encode(reply["result"]["recorded"]))
    assert isinstance(event, SnapshotRecorded)
    return event


def node_readings(event: SnapshotRecorded) -> dict[str, Any]:
    assert event.snapshot is not None
    (node,) = event.snapshot["nodes"]
    flat = {f"{t}.{s}.{k}": v for t, subs in node["measurements"].items()
            for s, keys in subs.items() for k, v in keys.items()}
    return flat


async def test_start_request_drift_and_restart(nats_server: NatsServer, bus: Bus,
                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    extra = tmp_path / "readings.json"
    extra.write_text(json.dumps({RACK: "r1"}))
    async with snapshotter(nats_server.url, snapshot_readings=str(extra)):
        first = await wait_event(bus, "snapshot", lambda e: e.reason == "start")
        assert first.site == SITE and first.snapshot is not None and first.object_name is None
        assert node_readings(first)[RACK] == "r1"
        assert "CPU.info.cores" in node_readings(first)

        answered = await ask(bus)
        assert answered.reason == "request" and answered.digest != first.digest
        stored = await wait_event(bus, "snapshot", lambda e: e.id == answered.id)
        assert stored.digest == answered.digest  # what was answered was also recorded

        extra.write_text(json.dumps({RACK: "r2"}))
        changed = await ask(bus)
        drift = await wait_event(bus, "drift", lambda e: e.current == changed.digest)
        paths = {c.path: c for c in drift.changes}
        assert paths[RACK].before == "r1" and paths[RACK].after == "r2"
        assert drift.previous == answered.digest
        assert "Memory.info.available-bytes" not in paths  # volatile: never drift

    # Restarted: the previous snapshot comes back from the stream, so drift survives it; and
    # with a tiny inline limit the snapshot goes to the object store.
    extra.write_text(json.dumps({RACK: "r3"}))
    async with snapshotter(nats_server.url, snapshot_readings=str(extra),
                           snapshot_inline_max_bytes="0"):
        drift = await wait_event(bus, "drift", lambda e: any(
            c.path == RACK and c.after == "r3" for c in e.changes))
        assert drift.previous == changed.digest
        restarted = await wait_event(bus, "snapshot", lambda e: e.digest == drift.current)
        assert restarted.reason == "start" and restarted.snapshot is None
        assert restarted.object_name

        # `cairn snapshot --site` reads it through the object store.
        from cairn.cli.snapshot import ask_site

        monkeypatch.setenv("CAIRN_NATS_URL", nats_server.url)
        monkeypatch.delenv("CAIRN_CONTEXT", raising=False)
        snap = await asyncio.to_thread(ask_site, SITE)
        assert snap.site == SITE and snap.readings(snap.nodes[0].node)[RACK] == "r3"


async def test_a_broken_readings_file_is_answered_as_an_error(nats_server: NatsServer, bus: Bus,
                                                              tmp_path: Path) -> None:
    extra = tmp_path / "readings.json"
    extra.write_text("[1, 2]")
    async with snapshotter(nats_server.url, snapshot_readings=str(extra)):
        await asyncio.sleep(0.2)
        data = await bus.request(subjects.site_snapshot_request(SITE), SNAPSHOT_REQUEST,
                                 timeout=30)
        reply = msgspec.json.decode(data)
        assert reply["ok"] is False and reply["error"]["code"] == "invalid"
        assert str(extra) in reply["error"].get("file", "")
