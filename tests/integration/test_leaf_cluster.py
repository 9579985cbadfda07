"""Sites on leaf nodes over a 3-server cluster (`cairn up --cluster 3 --leaf-sites`): every
member listens for leaves, each site's leaf is given them all, and when the member a site's
leaf is linked to is SIGKILLed mid-job (and not restarted), the leaf links to another, the
site's parent (on its leaf) carries on, and the federation holds each of the job's events
once, in order."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.request
from pathlib import Path

import pytest

from cairn import events as ev
from cairn.runtime.leaf import LeafNode
from tests.fixtures.federation import make_federation, running
from tests.integration.cp_helpers import write_job
from tests.integration.test_cluster import ROLES, STEPS, TICKER, Session, _history

pytestmark = pytest.mark.slow


def linked_to(leaf: LeafNode) -> int | None:
    """The leafnode port of the federation's member `leaf` is linked to now, or None."""
    assert leaf.server is not None
    with urllib.request.urlopen(f"{leaf.server.monitor_url}/leafz", timeout=5) as r:
        links = json.loads(r.read()).get("leafs") or []
    return int(links[0]["port"]) if links else None


@pytest.mark.timeout(240)
async def test_a_leaf_site_carries_on_when_its_clusters_server_dies(tmp_path: Path) -> None:
    fed = make_federation(tmp_path)
    fed.cluster_size = 3
    fed.leaf_sites = True
    async with running(fed, healthy_s=120):
        assert fed.cluster is not None
        leaf = fed.leaves["site-a"]
        ports = fed.cluster.leaf_ports
        assert len(ports) == 3 and linked_to(leaf) in ports
        session = Session(fed)
        try:
            client = await session.open()
            job_id = await client.submit(write_job(tmp_path / "job", script=TICKER,
                                                   roles=ROLES))
            # Mid-job: both workers have stored some of their metrics and not all.
            while {e.site for _, e in await _history(fed, job_id)
                   if isinstance(e, ev.WorkerMetric)} != {"site-a", "site-b"}:
                await asyncio.sleep(0.1)
            victim = ports.index(linked_to(leaf))
            members = fed.nats_members()
            # Not restarted: the site can finish only through another member.
            os.kill(members[victim].proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
            final = await session.ended(job_id, timeout=150)
            relinked = linked_to(leaf)
            history = await _history(fed, job_id)
        finally:
            await session.close()

    assert final.state == "completed", (final.cause, final.message, final.workers)
    events = [e for _, e in history]
    for site in ("site-a", "site-b"):
        steps = [m.step for m in events if isinstance(m, ev.WorkerMetric) and m.site == site]
        assert steps == list(range(STEPS)), f"{site}: every metric once, in order"
        # What the site's launcher, on its leaf, said of its worker: once each.
        launcher = [ev.tag_of(e) for e in events
                    if isinstance(e, ev.WorkerLaunching | ev.WorkerRunning | ev.WorkerExited)
                    and e.site == site]
        assert launcher == ["worker.launching", "worker.running", "worker.exited"], launcher
    assert relinked in ports and relinked != ports[victim], "linked to another member"
