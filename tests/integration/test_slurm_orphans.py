"""A Slurm site's launcher SIGKILLed right after a submit, before it recorded the job (the
`CAIRN_TEST_DIE_AFTER_SUBMIT` hook of `cairn.launcher.orphans`): restarted, it finds the
batch job again by its tag. One whose Cairn job ended meanwhile is cancelled (Slurm's
accounting says CANCELLED, not RUNNING to its deadline) and reported orphaned; one whose job
still runs is adopted and watched to its real end, launched once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cairn import events as ev
from cairn.client import Client
from cairn.launcher.backends.slurm import SlurmBackend
from cairn.launcher.backends.slurm.script import TAG_PREFIX
from cairn.launcher.backends.slurm.states import JobStatus
from cairn.launcher.orphans import TEST_DIE_AFTER_SUBMIT
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.federation import connect, make_federation
from tests.fixtures.slurm_lab import SlurmLab
from tests.integration.cp_helpers import study_events, write_job
from tests.integration.orphan_helpers import (
    PARENT,
    assert_adopted,
    assert_stopped_as_orphan,
    events_until,
)
from tests.integration.orphan_helpers import crash_after_submit as died_on_submit

pytestmark = pytest.mark.slow

OVER = """\
    roles:
      slow:
        entrypoint: "bash -c 'sleep 300'"
        sites: [site-a]
        resources: {cpus: 1, memory: 64Mi}
      crash:
        entrypoint: "bash -c 'sleep 1; exit 3'"
        sites: [site-b]
        resources: {cpus: 1, memory: 64Mi}
    """
RUNS = """\
    roles:
      client:
        entrypoint: "bash -c 'sleep 4'"
        sites: [site-a]
        resources: {cpus: 1, memory: 64Mi}
    """


async def crash_after_submit(fed: EmbeddedFederation, flag: Path, probe: SlurmBackend,
                             job: str) -> tuple[str, JobStatus]:
    """Wait for site-a's parent to die on its submit of `job`; its launch id and Slurm job."""
    launch_id = await died_on_submit(fed, flag, job)
    queued = [s for s in (await probe.driver.jobs()).values()
              if s.comment == TAG_PREFIX + launch_id]
    assert len(queued) == 1 and queued[0].active, queued
    return launch_id, queued[0]


async def test_a_launcher_killed_after_a_slurm_submit_finds_its_job_and_cancels_it_once_over(
        slurm_lab: SlurmLab, tmp_path: Path) -> None:
    fed = make_federation(tmp_path, ("hub", "site-a", "site-b"))
    fed.backends["site-a"] = "slurm"
    fed.site_settings["site-a"] = {
        "slurm": {"driver": "cli", "slurm_conf": str(slurm_lab.conf), "poll": 0.2}}
    flag = tmp_path / "die-after-submit"
    fed.extra_env[TEST_DIE_AFTER_SUBMIT] = str(flag)
    probe = SlurmBackend(tmp_path / "probe", driver="cli", env=slurm_lab.env)
    fed.start()
    client: Client | None = None
    try:
        await fed.wait_healthy(60)
        client = await connect(fed)

        # 1. Its job ends while the launcher is down: found at restart, and cancelled.
        flag.write_text("site-a/demo")
        over = await client.submit(write_job(tmp_path / "over", roles=OVER))
        over_launch, over_slurm = await crash_after_submit(fed, flag, probe, over)
        ended_over = await client.wait(over, timeout=90)  # site-b's worker failed it
        fed.respawn(PARENT)
        seen_over = await events_until(fed, over, ev.WorkerExited, timeout=90)
        deadline = time.monotonic() + 30
        while (accounted := await probe.driver.accounting(over_slurm.job_id)) is None or \
                accounted.active:  # slurmdbd records the end a moment after the controller
            assert time.monotonic() < deadline, accounted
            await asyncio.sleep(0.2)

        # 2. Its job still runs: the restarted launcher adopts the worker.
        flag.write_text("site-a/demo")
        runs = await client.submit(write_job(tmp_path / "runs", roles=RUNS))
        runs_launch, runs_slurm = await crash_after_submit(fed, flag, probe, runs)
        fed.respawn(PARENT)
        ended_runs = await client.wait(runs, timeout=90)
        seen_runs = await study_events(fed, job=runs)
        runs_accounted = await probe.driver.accounting(runs_slurm.job_id)
    finally:
        await probe.close()
        if client is not None:
            await client.close()
        fed.stop()

    assert_stopped_as_orphan(ended_over, seen_over, over_launch)
    assert accounted.state == "CANCELLED", accounted
    running = assert_adopted(ended_runs, seen_runs, runs_launch)
    assert running.native_id == runs_slurm.job_id, running
    assert runs_accounted is not None and runs_accounted.state == "COMPLETED", runs_accounted
