"""Evidence-gated jobs: of two sites only the one with valid evidence gets the job, with a
signed receipt naming the evidence; expired evidence and a drift that breaks a constraint make
the next job unschedulable with typed reasons; a new validation restores the site.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cairn import events as ev
from cairn.evidence.keys import load_signing_key
from cairn.evidence.store import recorded
from cairn.evidence.vsa import verify_receipt
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from cairn.snapshot import make_snapshot, remote
from cairn.state.job import JobState
from tests.fixtures.federation import connect, make_federation, started
from tests.integration.cp_helpers import study_events, write_job

RECIPE = "cpu-linux-process"
KERNEL = "OS.sysctl./proc/sys/kernel/osrelease"


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFederation]:
    with started(make_federation(tmp_path_factory.mktemp("gating"))) as federation:
        yield federation


async def validate(fed: EmbeddedFederation, site: str) -> str:
    """Validate `site` with `cairn validate`; wait for the signer's evidence; its digest."""
    assert fed.nats is not None
    env = {**os.environ, "CAIRN_NATS_URL": fed.nats.url, "CAIRN_ACTOR": DEFAULT_ADMIN,
           **fed.client_env()}
    env.pop("CAIRN_CONTEXT", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cairn", "validate", "--site", site, "--recipe", RECIPE,
        "-o", "json", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, (out + err).decode()
    run = json.loads(out)["run"]
    bus = await fed.bus()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = [e for e in await recorded(bus, site, RECIPE) if e.run == run]
            if found:
                return found[0].bundle
            await asyncio.sleep(0.2)
    finally:
        await bus.close()
    raise AssertionError(f"no evidence for {run}")


async def cairn_cli(fed: EmbeddedFederation, *args: str) -> tuple[int, str, str]:
    assert fed.nats is not None
    env = {**os.environ, "CAIRN_NATS_URL": fed.nats.url, "CAIRN_ACTOR": DEFAULT_ADMIN,
           **fed.client_env(), "CAIRN_TRUST": str(fed.trust_file)}
    env.pop("CAIRN_CONTEXT", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cairn", *args, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def submit(fed: EmbeddedFederation, tmp_path: Path, name: str, max_age: str) -> JobState:
    """Submit a gated job (one worker per site, at least one site); wait until it settles."""
    roles = """\
        roles:
          client:
            entrypoint: python main.py
            resources: {cpus: 1, memory: 128Mi}
            min_sites: 1
        """
    extra = f"requires: {{recipe: {RECIPE}, max_age: {max_age}}}\n"
    client = await connect(fed)
    try:
        job_id = await client.submit(write_job(tmp_path / name, name=name, roles=roles,
                                               extra=extra))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job = await client.job(job_id)
            if job.state not in ("submitted", "queued"):
                return job
            await asyncio.sleep(0.1)
    finally:
        await client.close()
    raise AssertionError(f"job {job_id} never left the queue")


async def test_gating_receipts_expiry_drift_and_restore(fed: EmbeddedFederation,
                                                        tmp_path: Path) -> None:
    bundle = await validate(fed, "site-a")

    # Only site-a has evidence: the job goes there alone, with a receipt naming the evidence.
    job = await submit(fed, tmp_path, "gated", "1h")
    assert job.state in ("dispatched", "running", "completed"), job
    deploys = [e for e in await study_events(fed)
               if isinstance(e, ev.DeployCommand) and e.job == job.job]
    assert [d.site for d in deploys] == ["site-a"]
    receipt = deploys[0].receipt
    assert receipt is not None
    key = load_signing_key(fed.evidence_key).verifying_key
    statement = verify_receipt(receipt, {key.key_id: key})
    assert statement.subject[0].digest["sha256"] == bundle
    assert statement.predicate.resource_uri == "cairn:site/site-a"
    assert statement.predicate.verification_result == "PASSED"
    code, out, err = await cairn_cli(fed, "evidence", "receipts", job.job, "--study", "demo",
                                     "-o", "json")
    assert code == 0, out + err
    [row] = json.loads(out)
    assert row["verified"] and row["by"] == "federation" and row["evidence"] == bundle

    # Too old for the next job's max age: unschedulable, a typed reason per site. Waited
    # for by the evidence's own time: until it is past the 2 s max age.
    bus = await fed.bus()
    try:
        [evidence] = [e for e in await recorded(bus, "site-a", RECIPE) if e.bundle == bundle]
    finally:
        await bus.close()
    assert evidence.validated_at is not None
    expires = evidence.validated_at + timedelta(seconds=2)
    await asyncio.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.05)
    job = await submit(fed, tmp_path, "too-old", "2s")
    assert job.state == "unschedulable", job
    assert job.reasons["site-a"].startswith("client: expired:"), job.reasons
    assert job.reasons["site-b"].startswith("client: no-evidence:"), job.reasons

    # A drift that breaks the recipe's kernel constraint demotes site-a before the next job.
    assert fed.nats is not None
    bus = await fed.bus(kit="site-a")  # the site's own snapshotter says what it is
    try:
        latest = await remote.latest(bus, "site-a")
        assert latest is not None
        nodes = {n.node: {**latest.readings(n.node), KERNEL: "4.19.0"} for n in latest.nodes}
        drifted = make_snapshot(site="site-a", taken_at=datetime.now(UTC), nodes=nodes)
        await bus.publish(await remote.record(bus, drifted, source="snapshotter@site-a",
                                              reason="schedule"))
    finally:
        await bus.close()
    job = await submit(fed, tmp_path, "drifted", "1h")
    assert job.state == "unschedulable", job
    assert job.reasons["site-a"].startswith("client: drifted:"), job.reasons
    assert KERNEL in job.reasons["site-a"]

    # A new validation (on a fresh, good snapshot) restores it.
    await validate(fed, "site-a")
    job = await submit(fed, tmp_path, "restored", "1h")
    assert job.state in ("dispatched", "running", "completed"), job
