"""Sites on leaf nodes, live: a study created after `cairn up --leaf-sites` started reaches its
leaf sites' events into its stream (the interest anchors follow membership), and a leaf node or
the anchor process that dies is brought back by `cairn up`'s supervisor, with a job at that
site completing afterwards. Real nats-servers, the real authority and parents throughout.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from cairn import events as ev
from cairn.events import StudyAdmin
from cairn.runtime._leafsites import ANCHORED
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from cairn.runtime.supervise import Supervisor
from tests.fixtures.federation import make_federation, running, session
from tests.integration.cp_helpers import ONLY_SITE_A, study_events, write_job
from tests.integration.test_leaf_sites import on_leaf

NEW = "gamma"
LIMITS = {"cpus": 4, "memory": "8Gi", "concurrent_jobs": 2}


@pytest.fixture
async def leaf_fed(tmp_path: Path) -> AsyncIterator[EmbeddedFederation]:
    """Leaf sites; site-a's own policy already names study `gamma`, which does not exist."""
    fed = make_federation(tmp_path)
    fed.leaf_sites = True
    runtime = fed.site_dir("site-a") / "local" / "study_runtime.yaml"
    runtime.parent.mkdir(parents=True)
    runtime.write_text(yaml.safe_dump({"format": 1, "studies": {
        name: {"limits": LIMITS} for name in ("demo", "validation", NEW)}}))
    async with running(fed):
        yield fed


def anchor_subs(fed: EmbeddedFederation) -> set[str]:
    """What the anchor process subscribes to now, as the federation's server lists it."""
    assert fed.nats is not None
    url = f"{fed.nats.monitor_url}/connz?subs=1&limit=1024"
    with urllib.request.urlopen(url, timeout=5) as r:
        conns = json.loads(r.read()).get("connections") or []
    return {s for c in conns if c.get("name") == "cairn-leaf-anchors"
            for s in c.get("subscriptions_list") or []}


async def until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    """Wait for a state (`check`, run off the loop: it may read a monitoring endpoint)."""
    try:
        async with asyncio.timeout(timeout):
            while not await asyncio.to_thread(check):
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"not within {timeout:g}s: {what}") from None


async def forge_membership(fed: EmbeddedFederation, site: str, study: str) -> None:
    """`site`, an insider, stores a claim that it joined `study`, on a subject it may write."""
    bus = await fed.bus("forger", kit=site)
    try:
        claim = ev.StudySiteAdded(id=f"forged-{site}", at=datetime.now(UTC),
                                  source="coordinator@hub", study=study, site=site)
        await bus.publish(claim, subject=f"cairn.study.demo.job.j-forged.site.{site}.accepted")
    finally:
        await bus.close()


async def run_at_site_a(fed: EmbeddedFederation, study: str, job_dir: Path) -> str:
    """Submit a job of one client at site-a; returns its id once it completed."""
    async with session(fed, study=study) as client:
        job = await client.submit(write_job(job_dir, roles=ONLY_SITE_A))
        final = await client.wait(job, timeout=90)
        assert final.state == "completed", (final.state, final.cause, final.message)
        worker = final.workers["site-a/client/0"]
        assert (worker.state, worker.exit_code) == ("exited", 0), worker
    return job


async def test_a_study_created_after_start_reaches_its_leaf_sites_and_no_other(
        leaf_fed: EmbeddedFederation, tmp_path: Path) -> None:
    fed = leaf_fed
    accepted = f"cairn.study.{NEW}.job.*.site.site-a.accepted"
    assert accepted not in anchor_subs(fed)
    seen: dict[str, list[str]] = {"site-a": [], "site-b": []}
    buses = {site: await on_leaf(fed, site) for site in seen}
    try:
        for site, bus in buses.items():
            async def note(msg: object, site: str = site) -> None:
                seen[site].append(str(getattr(msg, "subject", "")))
            await bus.subscribe_core(f"cairn.study.{NEW}.>", note)
            await bus.nc.flush()
        await forge_membership(fed, "site-b", NEW)
        async with session(fed) as admin:
            await admin.study_create(NEW, ["site-a"], [StudyAdmin(
                name=DEFAULT_ADMIN, org="coord", role="lead")])
        job = await run_at_site_a(fed, NEW, tmp_path / "job")
        assert accepted in anchor_subs(fed)
        # ... and site-b's, of a study site-b is not in, nothing; nor may it see the stream.
        assert seen["site-b"] == []
        with pytest.raises(Exception):  # noqa: B017 - no answer at all is the point
            await buses["site-b"].nc.request(f"$JS.cairn.API.STREAM.INFO.STUDY_{NEW}", b"",
                                             timeout=1.0)
    finally:
        for bus in buses.values():
            await bus.close()
    # site-a's leaf carried the coordinator's events of its new study (once its link's
    # rights were renewed with the study in them) ...
    assert f"cairn.study.{NEW}.job.{job}.completed" in seen["site-a"], seen["site-a"]
    # What site-a wrote behind its leaf is in the study's stream: its agent's and launcher's.
    events = await study_events(fed, NEW, job=job)
    mine = {type(e) for e in events if getattr(e, "site", None) == "site-a"}
    assert {ev.DeploymentAccepted, ev.WorkerLaunching, ev.WorkerExited} <= mine, mine

    # site-a leaves the study: its anchors there go (no other site had any).
    async with session(fed, study=NEW) as lead:
        await lead.study_remove_site("site-a")
    demo = "cairn.study.demo.job.*.site.site-a.accepted"

    def dropped() -> bool:
        # Read once, and only from a connected anchor process: while the authority renews
        # its connection (membership changed) the server lists none of its subscriptions.
        subs = anchor_subs(fed)
        return demo in subs and accepted not in subs

    await until("site-a's anchors in the study dropped, its demo ones kept", dropped)
    subs = anchor_subs(fed)
    assert not [s for s in subs if s.startswith(f"cairn.study.{NEW}.job.")], subs
    # What site-b said of itself counted for nothing.
    assert f"cairn.study.{NEW}.job.*.site.site-b.accepted" not in subs
    # Every anchor it asked for, at the start and since, the broker granted.
    refused = [line for line in fed.process("leaf-anchors").log.read_text().splitlines()
               if "permissions violation" in line]
    assert not refused, refused


@pytest.fixture
def supervised(leaf_fed: EmbeddedFederation) -> Iterator[tuple[Supervisor, list[str]]]:
    """`cairn up`'s supervisor over the federation, checking every 0.2 s in a thread."""
    lines: list[str] = []
    supervisor = Supervisor(leaf_fed, say=lines.append, backoff=(0.2,))
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.2):
            supervisor.check()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield supervisor, lines
    finally:
        stop.set()
        thread.join(10)


async def test_a_killed_leaf_and_anchor_process_come_back_and_the_site_still_works(
        leaf_fed: EmbeddedFederation, supervised: tuple[Supervisor, list[str]],
        tmp_path: Path) -> None:
    fed = leaf_fed
    supervisor, lines = supervised
    leaf = fed.leaves["site-a"]
    assert leaf.server is not None and leaf.server.proc is not None
    port, monitor, pid = leaf.port, leaf.server.monitor_port, leaf.server.proc.pid
    os.kill(pid, signal.SIGKILL)
    # Back on its own ports, and linked to the federation again (its own monitoring says).
    await until("leaf back", lambda: supervisor.restarts.get("leaf-site-a") == 1
                and leaf.linked())
    assert leaf.server is not None and leaf.server.proc is not None
    assert leaf.server.proc.pid != pid
    assert (leaf.port, leaf.server.monitor_port) == (port, monitor)
    await until("said so", lambda: any(
        line.startswith("leaf-site-a reached the federation again") for line in lines))

    anchors = fed.process("leaf-anchors")
    os.kill(anchors.proc.pid, signal.SIGKILL)
    # Restarted, and subscribed again (its log's second start line).
    await until("anchors back", lambda: supervisor.restarts.get("leaf-anchors") == 1
                and anchors.log.read_bytes().count(ANCHORED) == 2)
    assert any(line.startswith("leaf-anchors restarted") for line in lines), lines

    await run_at_site_a(fed, "demo", tmp_path / "job")
    assert set(supervisor.restarts) == {"leaf-site-a", "leaf-anchors"}, lines
