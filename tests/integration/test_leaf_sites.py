"""Sites on leaf nodes (`cairn up --leaf-sites`), on a real federation: each site's parent
connects to its own leaf nats-server, which dials the federation with the site's credential.

A site's uplink (its leaf's link and its workers' connections) runs through a proxy the test
cuts while the site's worker runs: the worker finishes, and once the link is back the
federation holds each of its events exactly once, in order, and the job completes. And what
crosses a leaf link is what the site's identity may read: a leaf of a site outside a study
carries nothing of it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from cairn import events as ev
from cairn.bus import Bus
from cairn.runtime import context
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from cairn.runtime.natsserver import free_port
from tests.fixtures.federation import connect, make_federation, running
from tests.fixtures.linkproxy import LinkProxy
from tests.integration.cp_helpers import ONLY_SITE_A, study_events, write_job

STEPS = 24
# Steps at a steady pace for a while, so the link is cut while it works.
WORKER = f"""\
import time

from cairn.worker import Worker, main


async def run(w: Worker) -> None:
    for step in range({STEPS}):
        await w.progress(step, {STEPS}, f"step {{step}}")
        time.sleep(0.25)

main(run)
"""


async def leaf_federation(tmp_path: Path) -> tuple[EmbeddedFederation, list[LinkProxy]]:
    """A federation of leaf sites whose site-a reaches it only through proxies."""
    fed = make_federation(tmp_path)
    fed.leaf_sites = True
    fed.port = free_port()
    fed.leaf_port = free_port()
    leaf_link, worker_link = LinkProxy(fed.leaf_port), LinkProxy(fed.port)
    fed.leaf_uplinks = {"site-a": leaf_link.url}
    fed.site_settings = {"site-a": {"worker_nats_url": worker_link.url}}
    return fed, [leaf_link, worker_link]


async def wait_for_progress(fed: EmbeddedFederation, job: str, steps: int,
                            timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        seen = [e for e in await study_events(fed, job=job) if isinstance(e, ev.WorkerProgress)]
        if len(seen) >= steps:
            return
        assert time.monotonic() < deadline, f"only {len(seen)} progress events"
        await asyncio.sleep(0.1)


async def cut_while_running(tmp_path: Path, cut_s: float) -> None:
    fed, links = await leaf_federation(tmp_path)
    try:
        async with running(fed):
            client = await connect(fed)
            try:
                job_dir = tmp_path / "job"
                job = await client.submit(write_job(job_dir, script=WORKER, roles=ONLY_SITE_A))
                await wait_for_progress(fed, job, 2)
                for link in links:
                    link.cut()
                await asyncio.sleep(cut_s)  # the outage itself: what the test is about
                for link in links:
                    link.restore()
                final = None
                async for state in client.watch(job, poll=0.2, timeout=120 + cut_s):
                    final = state
                assert final is not None and final.state == "completed", final
                worker = final.workers["site-a/client/0"]
                assert (worker.state, worker.exit_code) == ("exited", 0), worker
            finally:
                await client.close()
            events = await study_events(fed, job=job)
    finally:
        for link in links:
            link.close()
    progress = [e for e in events if isinstance(e, ev.WorkerProgress)]
    # Every step exactly once, in the order the worker took them.
    assert [e.step for e in progress] == list(range(STEPS))
    assert len({e.id for e in events}) == len(events)
    exits = [e for e in events if isinstance(e, ev.WorkerExited)]
    assert len(exits) == 1 and exits[0].exit_code == 0


async def test_a_sites_worker_runs_through_a_cut_of_its_leaf_link(tmp_path: Path) -> None:
    await cut_while_running(tmp_path, cut_s=5.0)


@pytest.mark.scale
async def test_a_sites_worker_runs_through_a_30s_cut_of_its_leaf_link(tmp_path: Path) -> None:
    await cut_while_running(tmp_path, cut_s=30.0)


SOLO = "solo"


@pytest.fixture
async def solo_federation(tmp_path: Path) -> AsyncIterator[EmbeddedFederation]:
    """Leaf sites, and a study `solo` of the hub and site-a alone."""
    fed = make_federation(tmp_path)
    fed.leaf_sites = True
    fed.dir.mkdir(parents=True)
    fed.federation_file.write_text(yaml.safe_dump({
        "federation": "local", "hub": "hub",
        "sites": [{"name": s, "org": "coord" if s == "hub" else f"org-{s}"}
                  for s in fed.sites],
        "admins": [{"name": DEFAULT_ADMIN, "org": "coord", "role": "project_admin"}],
        "studies": {"demo": {"sites": list(fed.sites), "admins": [DEFAULT_ADMIN]},
                    SOLO: {"sites": ["hub", "site-a"], "admins": [DEFAULT_ADMIN]}}},
        sort_keys=False))
    async with running(fed):
        yield fed


async def on_leaf(fed: EmbeddedFederation, site: str) -> Bus:
    """A connection to `site`'s leaf node, as anything on that site's host could make."""
    assert fed.trust is not None
    tls: ssl.SSLContext = context.tls_context(str(fed.trust.ca), None, None)
    return await Bus.connect(fed.leaves[site].url, name=f"on-{site}", tls=tls)


async def test_a_leaf_carries_nothing_of_a_study_its_site_is_not_in(
        solo_federation: EmbeddedFederation, tmp_path: Path) -> None:
    fed = solo_federation
    seen: dict[str, list[str]] = {"site-a": [], "site-b": []}
    buses = {site: await on_leaf(fed, site) for site in seen}
    try:
        for site, bus in buses.items():
            async def note(msg: object, site: str = site) -> None:
                seen[site].append(str(getattr(msg, "subject", "")))
            await bus.subscribe_core(f"cairn.study.{SOLO}.>", note)
            await bus.nc.flush()
        client = await connect(fed, study=SOLO)
        try:
            job = await client.submit(write_job(tmp_path / "job", roles=ONLY_SITE_A))
            # site-a's policy has no `solo`: its agent refuses, and the job fails. Either
            # way the coordinator's events of the job cross the federation's links.
            async for state in client.watch(job, poll=0.2, timeout=90):
                final = state
            assert final.terminal, final
        finally:
            await client.close()
        # site-a's leaf carried the coordinator's events of its study (the path works) ...
        assert f"cairn.study.{SOLO}.job.{job}.submitted" in seen["site-a"], seen["site-a"]
        # ... and site-b's, of a study site-b is not in, nothing; nor its stream.
        assert seen["site-b"] == []
        with pytest.raises(Exception):  # noqa: B017 - no answer at all is the point
            await buses["site-b"].nc.request(f"$JS.cairn.API.STREAM.INFO.STUDY_{SOLO}",
                                             b"", timeout=1.0)
    finally:
        for bus in buses.values():
            await bus.close()
