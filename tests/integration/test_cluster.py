"""A federation on a 3-server NATS cluster (`cairn up --cluster 3`): every stream and bucket
has three copies, and SIGKILL of one server mid-job loses no event, the job completes, no
Cairn service restarts, and the supervisor brings the server back on its same ports."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from cairn import events as ev
from cairn import subjects
from cairn.bus import Bus, replay
from cairn.client import Client
from cairn.client.timeline import TimelineEntry
from cairn.errors import CairnError, PermissionDenied, Unavailable
from cairn.runtime.context import Context, tls_context
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from cairn.runtime.natsserver import NatsServer
from cairn.runtime.supervise import Supervisor
from cairn.state.job import JobState
from tests.fixtures.federation import make_federation, running
from tests.integration.cp_helpers import write_job

STEPS = 40
# Each worker records a metric every 0.1 s for ~4 s and returns how many it had stored (each
# `metric` returns once JetStream acknowledged it): a server is killed while they do.
TICKER = f"""\
import time
from cairn.worker import SyncWorker
with SyncWorker.from_env() as w:
    for step in range({STEPS}):
        w.metric(step=step, value=float(step))
        time.sleep(0.1)
    w.result({{"stored": {STEPS}}})
"""
ROLES = """\
    roles:
      client:
        entrypoint: python main.py
        resources: {cpus: 1, memory: 256Mi}
        sites: [site-a, site-b]
    """


def _jsz(server: NatsServer) -> dict[str, object]:
    url = f"{server.monitor_url}/jsz?streams=1&config=1"
    with urllib.request.urlopen(url, timeout=5) as r:
        data: dict[str, object] = json.loads(r.read())
    return data


def _streams(server: NatsServer) -> dict[str, dict[str, object]]:
    """Stream name -> its detail (config, cluster: leader and replicas), as `server` sees."""
    out: dict[str, dict[str, object]] = {}
    for account in _jsz(server).get("account_details", []):  # type: ignore[union-attr]
        for stream in account.get("stream_detail", []):
            out[stream["name"]] = stream
    return out


async def _history(fed: EmbeddedFederation, job: str) -> list[tuple[int, ev.Event]]:
    bus = await fed.bus()
    try:
        return [(r.seq, r.event) async for r in replay(
            bus, "STUDY_demo", ev.STUDY_DECODER, filters=[subjects.job_all("demo", job)])
            if r.event is not None]
    finally:
        await bus.close()


@pytest.fixture
async def cluster_fed(tmp_path: Path) -> AsyncIterator[EmbeddedFederation]:
    fed = make_federation(tmp_path)
    fed.cluster_size = 3
    async with running(fed):
        yield fed


class Session:
    """A project admin's client that opens its session again when the library gave up on
    its connection, as a user would run the command again: during the few seconds a
    cluster elects new leaders, a request may be answered `Unavailable` (a bucket or stream
    without a leader yet), and a reconnect refused while the authority itself reconnects
    closes a connection for good (nats-py does not retry an error the server sent)."""

    def __init__(self, fed: EmbeddedFederation) -> None:
        self.context = Context(nats_url=fed.nats_url, study="demo", actor=DEFAULT_ADMIN,
                               **fed.client_options())
        self.client: Client | None = None
        self.met: list[str] = []  # when the follower reopened its session, and why
        self.grew = asyncio.Event()  # set whenever the follower saw a new event

    async def until(self, reached: Callable[[], bool], follower: asyncio.Task[None]) -> None:
        """Wait, on the follower's own progress, until `reached()` holds."""
        while not reached():
            # A follower that died raised what the client must not (not a CairnError).
            assert not follower.done(), follower.exception()
            self.grew.clear()
            grew = asyncio.ensure_future(self.grew.wait())
            try:
                await asyncio.wait({grew, follower}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                grew.cancel()

    async def open(self) -> Client:
        if self.client is not None and self.client._bus.nc.is_closed:
            await self.client.close()
            self.client = None
        if self.client is None:
            self.client = await Client.connect(self.context)
        return self.client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    async def follow(self, job: str, seen: list[TimelineEntry]) -> None:
        """Every stored event of `job`, each once, in order, across reopened sessions."""
        while True:
            try:
                client = await self.open()
                async for entry in client.events(follow=True, job=job, poll=0.1):
                    if not seen or entry.seq > seen[-1].seq:
                        seen.append(entry)
                        self.grew.set()
            except CairnError as exc:
                self.met.append(f"{time.strftime('%H:%M:%S')} {type(exc).__name__}: {exc}")
                await asyncio.sleep(0.2)

    async def ended(self, job: str, timeout: float = 90) -> JobState:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    state = await (await self.open()).job(job)
                    if state.terminal:
                        return state
                except Unavailable:
                    pass  # a leader being elected: asked again in a moment
                await asyncio.sleep(0.2)


@pytest.mark.timeout(180)
async def test_one_of_three_servers_killed_mid_job_loses_nothing(
        cluster_fed: EmbeddedFederation, tmp_path: Path, caplog: pytest.LogCaptureFixture
        ) -> None:
    fed = cluster_fed
    caplog.set_level(logging.INFO, logger="cairn")
    assert fed.cluster is not None
    members = fed.nats_members()
    ports = [(m.port, m.monitor_port) for m in members]
    # Each member lists the streams it holds a copy of: together, every stream there is.
    streams = {name: s for m in members for name, s in _streams(m).items()}
    assert "STUDY_demo" in streams and any(n.startswith("KV_") for n in streams), streams
    copies = {name: s["config"]["num_replicas"] for name, s in streams.items()}  # type: ignore[index]
    assert copies and set(copies.values()) == {3}, f"every stream and bucket has 3: {copies}"

    parents = {p.name: p.proc.pid for p in fed.processes}
    said: list[str] = []
    supervisor = Supervisor(fed, say=said.append)
    stop = threading.Event()

    def supervise() -> None:
        while not stop.wait(0.2):
            supervisor.check()

    watcher = threading.Thread(target=supervise, daemon=True)
    watcher.start()
    session, watcher_session = Session(fed), Session(fed)
    seen: list[TimelineEntry] = []
    try:
        client = await session.open()
        job_id = await client.submit(write_job(tmp_path / "job", script=TICKER, roles=ROLES))
        follower = asyncio.create_task(watcher_session.follow(job_id, seen))
        # Mid-job: both workers have stored some of their metrics and not all.
        await watcher_session.until(lambda: sum(e.type == "worker.metric" for e in seen) >= 6,
                                    follower)
        leader = str(_streams(members[0])["STUDY_demo"]["cluster"]["leader"])  # type: ignore[index]
        victim = int(leader.rsplit("-", 1)[1])  # the study stream's leader: the worst one
        os.kill(members[victim].proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
        killed_at = time.strftime("%H:%M:%S")

        final = await session.ended(job_id)
        assert final.state == "completed", (final.cause, final.message, final.workers)
        history = await _history(fed, job_id)
        # The follower has what the stream holds once it got to the job's last event.
        try:
            async with asyncio.timeout(30):
                await watcher_session.until(lambda: bool(seen) and seen[-1].seq >= history[-1][0],
                                            follower)
        except TimeoutError:
            said_of_reads = [f"{time.strftime('%H:%M:%S', time.localtime(r.created))} "
                             f"{r.getMessage()}" for r in caplog.records
                             if r.name in ("cairn.client", "cairn.bus")][-15:]
            pytest.fail(f"the follower stopped at seq {seen[-1].seq if seen else None} of "
                        f"{history[-1][0]} (server killed at {killed_at}); it reopened after "
                        f"{watcher_session.met[-10:]}; the reads said {said_of_reads}")
        follower.cancel()
    finally:
        stop.set()
        await asyncio.to_thread(watcher.join, 10)
        await session.close()
        await watcher_session.close()

    events = [e for _, e in history]
    metrics = [e for e in events if isinstance(e, ev.WorkerMetric)]
    for site in ("site-a", "site-b"):
        steps = [m.step for m in metrics if m.site == site]
        assert steps == list(range(STEPS)), f"{site}: every acknowledged metric, once, in order"
    results = [e for e in events if isinstance(e, ev.WorkerResult)]
    assert sorted(r.site for r in results) == ["site-a", "site-b"]
    # What a client following the study saw is the stream's history of the job, no more.
    assert [e.seq for e in seen] == [seq for seq, _ in history], \
        "a client saw each stored event once, in order, and nothing else"

    assert supervisor.restarts == {f"nats-server-{victim}": 1}, said
    assert [(m.port, m.monitor_port) for m in fed.nats_members()] == ports, "same ports"
    assert members[victim].proc is not None and members[victim].proc.poll() is None
    assert {p.name: p.proc.pid for p in fed.processes} == parents, "no service restarted"
    assert all(p.proc.poll() is None for p in fed.processes), said
    await _each_member_admits_and_confines(fed, victim)


async def _each_member_admits_and_confines(fed: EmbeddedFederation, restarted: int) -> None:
    """Every member sends its connections to the one authority (through the routes for
    all but the one it is connected to), and the rights it answers with hold there: site-a,
    on the member that was restarted, reads nothing of site-b's stream."""
    assert fed.trust is not None
    tls = tls_context(str(fed.trust.ca), None, None)
    for index, member in enumerate(fed.nats_members()):
        bus = await Bus.connect(member.url, name=f"cairn-test-{index}", tls=tls,
                                creds=str(fed.trust.creds("site-a")), retry_for=10)
        try:
            if index == restarted:
                with pytest.raises(PermissionDenied):
                    async for _ in replay(bus, subjects.site_stream("site-b").name, None):
                        pass
            else:
                await bus.nc.flush(timeout=5)
        finally:
            await bus.close()
