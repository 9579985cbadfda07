"""A Slurm site's parent killed (SIGKILL) mid-job and started again: the launcher finds its
batch jobs again, through the CLI driver (site-a) and slurmrestd (site-b) — one still running,
which it watches to its end, and one that ended while it was down, whose real exit it reports."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cairn import events as ev
from cairn.client import Client
from cairn.launcher.backends.slurm import SlurmBackend
from tests.fixtures.federation import connect, make_federation
from tests.fixtures.slurm_lab import SlurmLab
from tests.integration.cp_helpers import study_events, write_job

pytestmark = pytest.mark.slow
SITES = ("site-a", "site-b")


def roles(command: str) -> str:
    return ("roles:\n  client:\n"
            f"    entrypoint: \"bash -c '{command}'\"\n"
            "    sites: [site-a, site-b]\n    resources: {cpus: 1, memory: 64Mi}\n")


async def running_events(fed: object, job: str, count: int, timeout: float = 60
                         ) -> list[ev.WorkerRunning]:
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in await study_events(fed, job=job)  # type: ignore[arg-type]
                 if isinstance(e, ev.WorkerRunning)]
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{job}: {len(found)} of {count} workers running"
        await asyncio.sleep(0.2)


async def exited_events(fed: object, job: str, count: int, timeout: float = 60
                        ) -> list[ev.WorkerExited]:
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in await study_events(fed, job=job)  # type: ignore[arg-type]
                 if isinstance(e, ev.WorkerExited)]
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{job}: {len(found)} of {count} workers exited"
        await asyncio.sleep(0.2)


async def test_a_restarted_slurm_launcher_reattaches_and_reports_what_ended_meanwhile(
        slurm_lab: SlurmLab, tmp_path: Path) -> None:
    fed = make_federation(tmp_path, ("hub", *SITES))
    fed.backends.update({site: "slurm" for site in SITES})
    fed.site_settings.update({
        "site-a": {"slurm": {"driver": "cli", "slurm_conf": str(slurm_lab.conf), "poll": 0.2}},
        "site-b": {"slurm": {"driver": "rest", "url": f"unix:{slurm_lab.rest_socket}",
                             "user": "root", "jwt_key": str(slurm_lab.jwt_key), "poll": 0.2}},
    })
    fed.start()
    client: Client | None = None
    try:
        await fed.wait_healthy(60)
        client = await connect(fed)
        short = await client.submit(write_job(tmp_path / "short", roles=roles("sleep 1; exit 3")))
        long = await client.submit(write_job(tmp_path / "long", roles=roles("sleep 8")))
        short_jobs = await running_events(fed, short, 2)
        await running_events(fed, long, 2)
        for site in SITES:
            fed.kill(f"site-{site}")  # agent and launcher, as a crash would

        # While nobody watches, the short jobs end (asked of Slurm directly).
        probe = SlurmBackend(tmp_path / "probe", driver="cli", env=slurm_lab.env)
        deadline = time.monotonic() + 60
        for running in short_jobs:
            while True:
                listed = (await probe.driver.jobs()).get(running.native_id)
                if listed is not None and not listed.active:
                    break
                assert time.monotonic() < deadline, listed
                await asyncio.sleep(0.2)
        await probe.close()

        for site in SITES:
            fed.respawn(f"site-{site}")
        ended_short = await client.wait(short, timeout=90)
        ended_long = await client.wait(long, timeout=90)
        short_exits = await exited_events(fed, short, 2)
        events = {job: await study_events(fed, job=job) for job in (short, long)}
    finally:
        if client is not None:
            await client.close()
        fed.stop()
    # The real exit of the job that ended unwatched, not a lost worker.
    assert ended_short.state == "failed", ended_short
    assert sorted((e.site, e.exit_code, e.reason) for e in short_exits) == [
        ("site-a", 3, "crashed"), ("site-b", 3, "crashed")]
    assert ended_long.state == "completed", ended_long
    for job, seen in events.items():
        launches = [e for e in seen if isinstance(e, ev.WorkerLaunching)]
        assert len(launches) == 2, f"{job}: nothing is launched twice"
