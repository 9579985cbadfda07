"""Garbage on every subject family of a live federation: every service stays healthy, every
message a service consumes is dead-lettered, and a job still runs to completion afterwards.
Every message Cairn itself sends says what it is (`Content-Type`)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import msgspec

from cairn import subjects
from cairn.bus import CONTENT_TYPE, Bus, replay
from cairn.client import Client
from cairn.events import DEADLETTER_DECODER
from cairn.runtime.context import tls_context
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from tests.integration.cp_helpers import write_job
from tests.integration.insiders import worker_creds

GARBAGE = (b"\xff\xfe not json {", b'{"type": "job.submitted", "job": 7, "roles": "x"}',
           b'{"type": "cmd.deploy", "params": ' + b"[" * 5000 + b"]" * 5000 + b"}")


def consumed_subjects() -> dict[str, str]:
    """Subject -> the identity that may write it (garbage from its rightful writer: the
    broker refuses anyone else), each consumed by a service's durable consumer."""
    return {
        subjects.job("demo", "j-garbage", "submitted"): "hub",
        subjects.study_admin("demo", "site-added"): "hub",
        subjects.site_cmd("demo", "site-a", "deploy"): "hub",
        subjects.site_launch("site-a", "requested"): "site-a",
        subjects.fed("seeded"): "hub",
        subjects.site_event("site-b", "snapshot"): "site-b",
        subjects.validation("site-a", "cpu-docker", "completed"): "hub",
        subjects.evidence("site-a", "cpu-docker"): "hub",
    }


async def test_garbage_on_every_family_is_dead_lettered_and_nothing_stops(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    assert federation.nats is not None
    targets = consumed_subjects()
    writers = {name: await federation.bus(kit=name) for name in set(targets.values())}
    bus = writers["hub"]
    try:
        for n, (subject, writer) in enumerate(targets.items()):
            for k, data in enumerate(GARBAGE):
                await writers[writer].publish_bytes(subject, data, msg_id=f"garbage-{n}-{k}")
        # Families nobody consumes durably: core subjects, the data plane, dead letters.
        for data in GARBAGE:
            await writers["site-a"].publish_core(subjects.heartbeat("site-a"), data)
        worker = await Bus.connect(federation.nats.url, creds=str(worker_creds(
            federation, job_dir, study="demo", job="j-garbage", site="site-a")),
            tls=tls_context(str(federation.trust.ca) if federation.trust else None, None,
                            None))
        try:
            await worker.publish_bytes(subjects.data("demo", "j-garbage", "all", "weights"),
                                       GARBAGE[0], msg_id="garbage-data")
        finally:
            await worker.close()
        await bus.publish_bytes(subjects.deadletter("STUDY_demo"), GARBAGE[0],
                                msg_id="garbage-dl")
        admin = await federation.bus(kit=DEFAULT_ADMIN)
        try:
            for data in GARBAGE:  # requests that are garbage get an error reply, not silence
                reply = await admin.request(subjects.api_fed("study-list"), data, timeout=10)
                assert msgspec.json.decode(reply)["ok"] is False
                await admin.request(subjects.health("agent", "site-a"), data, timeout=10)
        finally:
            await admin.close()

        letters = await _wait_dead_letters(bus, set(targets), len(GARBAGE))
        for subject in targets:
            assert letters.get(subject, 0) >= len(GARBAGE), (subject, letters)
    finally:
        for writer in writers.values():
            await writer.close()

    await federation.wait_healthy(60)
    assert all(p.proc.poll() is None for p in federation.processes)
    # `cairn deadletter list` still reads the stream, with the garbage wrapper in it.
    assert len(await client.dead_letters()) >= len(targets) * len(GARBAGE)
    job_id = await client.submit(write_job(job_dir))
    final = await client.wait(job_id, timeout=120)
    assert final.state == "completed", (final.cause, final.message)


async def test_every_message_says_its_content_type(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    assert federation.nats is not None
    seen: list[tuple[str, dict[str, str], bytes]] = []
    bus = await federation.bus()

    async def note(msg: Any) -> None:
        seen.append((msg.subject, dict(msg.headers or {}), bytes(msg.data)))

    try:
        # Everything the hub may read live (it may not subscribe to all of `cairn.>`).
        for subject in (subjects.study_all("demo"), subjects.data_all("demo"),
                        subjects.heartbeat_all(), f"{subjects.ROOT}.fed.>",
                        *(subjects.site_launch_all(s) for s in federation.sites),
                        subjects.validation_any(), subjects.files_all("demo")):
            await bus.subscribe_core(subject, note)
        job_id = await client.submit(write_job(job_dir, script=DATA_PLANE_JOB, roles=ROLES))
        final = await client.wait(job_id, timeout=180)
        assert final.state == "completed", (final.cause, final.message, final.workers)
        # Heartbeats are core messages too: wait for one from every site after the job.
        beats = {subjects.heartbeat(site) for site in federation.sites}
        after = len(seen)
        async with asyncio.timeout(30):
            while not beats <= {subject for subject, _, _ in seen[after:]}:
                await asyncio.sleep(0.05)
    finally:
        await bus.close()
    by_kind: dict[str, int] = {}
    for subject, headers, data in seen:
        kind = headers.get(CONTENT_TYPE)
        assert kind in ("application/json", "application/msgpack"), (subject, headers)
        if subject.startswith(f"{subjects.ROOT}.data."):
            assert kind == "application/msgpack", subject
            msgspec.msgpack.decode(data)
        elif data:
            assert kind == "application/json", subject
            msgspec.json.decode(data)
        by_kind[kind] = by_kind.get(kind, 0) + 1
    assert by_kind.get("application/msgpack", 0) >= 2, "the job's data-plane messages"
    assert by_kind.get("application/json", 0) >= 10


DATA_PLANE_JOB = """\
from cairn.worker import Worker, main


async def server(w: Worker) -> None:
    got = await w.receive("hello", 60)
    await w.send("client", got.sender_rank, "bye", {"n": 1})


async def client(w: Worker) -> None:
    await w.send("server", 0, "hello", {"weights": [1.0, 2.0]})
    await w.receive("bye", 60)

import os
main(server if os.environ["CAIRN_ROLE"] == "server" else client)
"""
ROLES = """\
    roles:
      server:
        entrypoint: python main.py
        resources: {cpus: 1, memory: 256Mi}
      client:
        entrypoint: python main.py
        sites: [site-a]
        resources: {cpus: 1, memory: 256Mi}
    """


async def _wait_dead_letters(bus: Bus, wanted: set[str], each: int,
                             timeout: float = 90) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        counts: dict[str, int] = {}
        async for item in replay(bus, subjects.DEADLETTER_STREAM.name, DEADLETTER_DECODER):
            if item.event is not None:
                counts[item.event.subject] = counts.get(item.event.subject, 0) + 1
        if all(counts.get(s, 0) >= each for s in wanted) or time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.5)
