"""Node-level facts through collection jobs: the site's launcher runs one job worker per node,
and a node that does not report is an error in the snapshot, never silently missing."""

from __future__ import annotations

import socket
from pathlib import Path

from cairn import events as ev
from cairn.runtime.embedded import EmbeddedFederation
from cairn.snapshot import flatten
from tests.fixtures.federation import connect, make_federation
from tests.integration.cp_helpers import study_events


async def test_node_facts_come_from_a_collection_job_through_the_launcher(
        tmp_path: Path) -> None:
    fed: EmbeddedFederation = make_federation(tmp_path)
    fed.site_options = {"snapshot_collect": "jobs", "snapshot_initial_delay_s": "60"}
    fed.start()
    try:
        await fed.wait_healthy(60)
        client = await connect(fed)
        try:
            snap = await client.snapshot("site-a", timeout=60)
        finally:
            await client.close()
        host = socket.gethostname()
        assert [n.node for n in snap.nodes] == [host]
        readings = flatten(snap.nodes[0])
        assert readings["OS.sysctl./proc/sys/kernel/osrelease"]
        assert readings["CPU.info.cores"] >= 1  # type: ignore[operator]
        assert not [e for e in snap.errors if e.collector == "node-job"]
        # The facts were measured by a worker the site's launcher started.
        events = await study_events(fed, study="validation")
        jobs = {e.job for e in events if isinstance(e, ev.JobSubmitted)
                and e.name == "snapshot-nodes"}
        launched = [e for e in events if isinstance(e, ev.WorkerLaunching) and e.job in jobs]
        assert jobs and [e.site for e in launched] == ["site-a"]
    finally:
        fed.stop()
