"""FedAvg (examples/fedavg) with its client sites on Slurm: one through the CLI driver, one
through slurmrestd; the hub's server runs as a process. The job must complete, each client
must have run as a Slurm batch job of the lab cluster, and the job must end cleanly: every
worker exits 0 on its own, and Slurm (the controller and, where it runs, the accounting
database) records every client's batch job as COMPLETED, not cancelled or failed."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from cairn import events as ev
from tests.fixtures.federation import connect, make_federation
from tests.fixtures.slurm_lab import SlurmLab
from tests.integration.cp_helpers import default_policy, rewrite_runtime, study_events
from tests.integration.test_fedavg import (
    assert_clean_end,
    fedavg_job,
    server_result,
    setup_data,
)

pytestmark = pytest.mark.slow


async def test_fedavg_runs_with_its_clients_on_slurm(slurm_lab: SlurmLab,
                                                     tmp_path: Path) -> None:
    fed = make_federation(tmp_path, ("hub", "site-a", "site-b"))
    fed.backends.update({"site-a": "slurm", "site-b": "slurm"})
    fed.site_settings.update({
        "site-a": {"slurm": {"driver": "cli", "slurm_conf": str(slurm_lab.conf), "poll": 0.2}},
        "site-b": {"slurm": {"driver": "rest", "url": f"unix:{slurm_lab.rest_socket}",
                             "user": "root", "jwt_key": str(slurm_lab.jwt_key), "poll": 0.2}},
    })
    fed.start()
    try:
        await fed.wait_healthy(60)
        setup_data.write(fed.dir / "sites", hub=fed.hub)
        # The study's slurm: settings at site-a reach its batch jobs.
        policy = default_policy(fed, "site-a")
        policy["slurm"] = {"partition": "one", "time": "5"}
        await rewrite_runtime(fed, "site-a", {"demo": policy})
        client = await connect(fed)
        try:
            job_id = await client.submit(fedavg_job(tmp_path, rounds=2, min_sites=2))
            final = await client.wait(job_id, timeout=180)
            log = b"".join([c.data async for c in client.logs(job_id)]).decode()
        finally:
            await client.close()
        events = await study_events(fed, job=job_id)
        await assert_clean_end(fed, job_id, workers=3)
    finally:
        fed.stop()
    assert final.state == "completed", (final, log)
    result = server_result(final)
    assert len(result["accuracy"]) == 2
    assert all(r["sites"] == ["site-a", "site-b"] for r in result["rounds"])
    launching = sorted((e.site, e.backend) for e in events if isinstance(e, ev.WorkerLaunching))
    assert launching == [("hub", "process"), ("site-a", "slurm"), ("site-b", "slurm")]
    # The clients' native ids are Slurm job ids whose comment is their launch id.
    running = {e.site: e for e in events if isinstance(e, ev.WorkerRunning)}
    for site in ("site-a", "site-b"):
        shown = await asyncio.to_thread(
            subprocess.run, ["scontrol", "show", "job", running[site].native_id],
            env=slurm_lab.env, capture_output=True, text=True, timeout=30, check=True)
        out = shown.stdout
        assert f"cairn:{running[site].launch_id}" in out, out
        assert f"JobName=cairn-{job_id}-client-{running[site].rank}" in out
        assert "JobState=COMPLETED" in out and "ExitCode=0:0" in out, out
        partition, limit = (("one", "00:05:00") if site == "site-a" else ("all", "00:10:00"))
        assert f"Partition={partition} " in out and f"TimeLimit={limit}" in out, out
        if slurm_lab.accounting:
            assert await accounted(slurm_lab, running[site].native_id) == "COMPLETED|0:0"


async def accounted(lab: SlurmLab, job: str, timeout: float = 30.0) -> str:
    """The batch job's `State|ExitCode` in the accounting database, once slurmdbd has its end
    (slurmctld sends it there asynchronously; bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    row = ""
    while loop.time() < deadline:
        out = await asyncio.to_thread(
            subprocess.run, ["sacct", "-j", job, "-X", "-n", "-P", "-o", "State,ExitCode"],
            env=lab.env, capture_output=True, text=True, timeout=30, check=True)
        row = out.stdout.strip()
        if row and row.split("|")[0] not in ("PENDING", "RUNNING", "COMPLETING"):
            return row
        await asyncio.sleep(0.2)
    raise AssertionError(f"sacct has no end for job {job} after {timeout:g}s: {row!r}")
