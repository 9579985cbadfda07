"""Nothing is launched twice. Each worker appends a token of its own to a file in its folder
when it starts (a second start adds a line or a folder; nothing overwrites). A site parent
killed with SIGKILL while its worker runs comes back and reattaches; then the site's deploy
command and launch request are published again under FRESH message ids, as a replay an hour
later would be (JetStream's duplicate window cannot drop them): the starts before and after
are the same ones."""

from __future__ import annotations

import asyncio

import msgspec

from cairn import events as ev
from cairn import subjects
from cairn.bus import replay
from cairn.client import Client
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.cp_helpers import ONLY_SITE_A, release_workers, write_job

HELD = '''\
import os, pathlib, time
with open("starts", "a") as f:  # its own folder: the only place of the host it sees
    f.write(f"{os.environ['CAIRN_JOB']} {os.environ['CAIRN_SITE']} {os.urandom(8).hex()}\\n")
release = pathlib.Path("release")
for _ in range(1200):  # held until the test releases it, 120 s at most
    if release.exists():
        break
    time.sleep(0.1)
'''


async def _republish_under_fresh_ids(fed: EmbeddedFederation, job_id: str) -> None:
    assert fed.nats is not None
    bus = await fed.bus()
    site_a = await fed.bus(kit="site-a")  # the launch subject is site-a's agent's to write
    try:
        deploys = [r.event async for r in replay(
            bus, subjects.study_stream("demo").name, ev.STUDY_DECODER,
            filters=[subjects.site_cmds("demo", "site-a")])
            if isinstance(r.event, ev.DeployCommand) and r.event.job == job_id]
        launches = [r.event async for r in replay(
            bus, subjects.site_stream("site-a").name, ev.SITE_DECODER)
            if isinstance(r.event, ev.LaunchRequested) and r.event.job == job_id]
        assert len(deploys) == 1 and len(launches) == 1, (deploys, launches)
        for writer, event in ((bus, deploys[0]), (site_a, launches[0])):
            await writer.publish(msgspec.structs.replace(event, id=f"{event.id}.an-hour-later"))
    finally:
        await site_a.close()
        await bus.close()


async def _starts(fed: EmbeddedFederation, count: int, timeout_s: float = 60.0) -> list[str]:
    """Every start any worker recorded, once there are `count`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        lines = [line for path in fed.dir.glob("sites/*/work/workers/*/starts")
                 for line in path.read_text().splitlines()]
        if len(lines) >= count or asyncio.get_running_loop().time() > deadline:
            assert len(lines) >= count, f"only {len(lines)} start(s): {lines}"
            return lines
        await asyncio.sleep(0.1)


async def test_a_killed_site_and_replayed_commands_start_nothing_twice(
        federation: EmbeddedFederation, client: Client, job_dir) -> None:  # type: ignore[no-untyped-def]
    jobs: list[str] = []
    try:
        job_id = await client.submit(write_job(job_dir / "held", name="held", script=HELD))
        jobs.append(job_id)
        before = sorted(await _starts(federation, 2))  # site-a and site-b
        assert {line.split()[1] for line in before} == {"site-a", "site-b"}

        federation.kill("site-site-a")  # SIGKILL, as a crash: its worker lives on
        federation.respawn("site-site-a")
        await federation.wait_healthy(60)
        await _republish_under_fresh_ids(federation, job_id)

        # A later job at site-a starts only after site-a's agent and launcher handled what
        # was published before it (each consumes its stream in order).
        sentinel = await client.submit(write_job(job_dir / "sentinel", name="sentinel",
                                                 script=HELD, roles=ONLY_SITE_A))
        jobs.append(sentinel)
        lines = await _starts(federation, 3)
        assert [line.split()[0] for line in lines].count(sentinel) == 1
        assert sorted(line for line in lines if line.startswith(job_id)) == before

        for job in jobs:
            release_workers(federation, job)
        final = await client.wait(job_id, timeout=60)
        assert final.state == "completed", final
        assert all(w.exit_code == 0 for w in final.workers.values())
        assert (await client.wait(sentinel, timeout=60)).state == "completed"
        # Nothing started late, either.
        assert sorted(await _starts(federation, 3)) == sorted(lines)
    finally:
        for job in jobs:
            release_workers(federation, job)
