"""A process site's launcher SIGKILLed right after it spawned a worker, before it recorded
it (the `CAIRN_TEST_DIE_AFTER_SUBMIT` hook of `cairn.launcher.orphans`): restarted, it finds
the worker again by the note it wrote at the spawn. One whose Cairn job ended meanwhile is
stopped (the process is gone, not left sleeping to its deadline) and reported orphaned; one
whose job still runs is adopted and watched to its real end, launched once."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn import events as ev
from cairn.client import Client
from cairn.launcher.orphans import TEST_DIE_AFTER_SUBMIT
from tests.fixtures.federation import connect, make_federation
from tests.integration.cp_helpers import processes, study_events, write_job
from tests.integration.orphan_helpers import (
    PARENT,
    assert_adopted,
    assert_stopped_as_orphan,
    crash_after_submit,
    events_until,
)

pytestmark = pytest.mark.slow

# A sleep no other process on the machine has: how the test tells whether the worker lives.
MARK = "317"
OVER = f"""\
    roles:
      slow:
        entrypoint: "bash -c 'sleep {MARK}'"
        sites: [site-a]
        resources: {{cpus: 1, memory: 64Mi}}
      crash:
        entrypoint: "bash -c 'sleep 1; exit 3'"
        sites: [site-b]
        resources: {{cpus: 1, memory: 64Mi}}
    """
RUNS = """\
    roles:
      client:
        entrypoint: "bash -c 'sleep 4'"
        sites: [site-a]
        resources: {cpus: 1, memory: 64Mi}
    """


def sleepers() -> list[int]:
    """The pids of processes running `sleep MARK`."""
    return processes(lambda argv: argv[:2] == [b"sleep", MARK.encode()])


async def test_a_launcher_killed_after_a_process_spawn_finds_its_worker_and_stops_it_once_over(
        tmp_path: Path) -> None:
    fed = make_federation(tmp_path, ("hub", "site-a", "site-b"))
    flag = tmp_path / "die-after-submit"
    fed.extra_env[TEST_DIE_AFTER_SUBMIT] = str(flag)
    fed.start()
    client: Client | None = None
    try:
        await fed.wait_healthy(60)
        client = await connect(fed)

        # 1. Its job ends while the launcher is down: found at restart, and stopped.
        flag.write_text("site-a/demo")
        over = await client.submit(write_job(tmp_path / "over", roles=OVER))
        over_launch = await crash_after_submit(fed, flag, over)
        ended_over = await client.wait(over, timeout=90)  # site-b's worker failed it
        survived = sleepers()  # the worker outlived its launcher: there is an orphan
        fed.respawn(PARENT)
        seen_over = await events_until(fed, over, ev.WorkerExited, timeout=90)
        left = sleepers()

        # 2. Its job still runs: the restarted launcher adopts the worker.
        flag.write_text("site-a/demo")
        runs = await client.submit(write_job(tmp_path / "runs", roles=RUNS))
        runs_launch = await crash_after_submit(fed, flag, runs)
        fed.respawn(PARENT)
        ended_runs = await client.wait(runs, timeout=90)
        seen_runs = await study_events(fed, job=runs)
    finally:
        if client is not None:
            await client.close()
        fed.stop()

    assert len(survived) == 1, survived
    assert_stopped_as_orphan(ended_over, seen_over, over_launch)
    assert left == [], f"the orphan still runs: {left}"
    assert_adopted(ended_runs, seen_runs, runs_launch)
