"""Cancel, timeouts, OOM, and parents killed with SIGKILL mid-job.

Cancel, timeout and OOM share one federation (`shared_fed`): each waits for its own job's
end and looks only at that job; the tests that kill a parent get their own.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cairn import events as ev
from cairn.client import Client
from cairn.launcher.backends.process import memory_limit_mechanism
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.cp_helpers import study_events, worker_process, write_job

SLEEPER = """\
import os, pathlib, sys, time
pathlib.Path(os.environ["CAIRN_WORKDIR"], "started").write_text(str(os.getpid()))
print("started", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 60)
print("finished", flush=True)
"""

# Records the SIGTERM it gets in its work dir, then exits as the default action would. A worker
# that ended any other way (SIGKILL after the grace, or never signalled) leaves no record.
TERM_RECORDER = """\
import os, pathlib, signal, time
workdir = pathlib.Path(os.environ["CAIRN_WORKDIR"])
def stop(signum, frame):
    (workdir / "terminated").write_text(signal.Signals(signum).name)
    os._exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
(workdir / "started").write_text(str(os.getpid()))
time.sleep(600)
"""


def sleeper_roles(seconds: float) -> str:
    return f"""\
        roles:
          client:
            entrypoint: python main.py {seconds}
            resources: {{cpus: 1, memory: 256Mi}}
        """


async def wait_running(client: Client, job_id: str, count: int = 2,
                       timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = await client.job(job_id)
        if sum(w.state == "running" for w in job.workers.values()) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"workers of {job_id} not running: {await client.job(job_id)}")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except FileNotFoundError:
        return False


async def worker_pids(fed: EmbeddedFederation, job_id: str, count: int = 2,
                      sites: tuple[str, ...] | None = None) -> list[int]:
    """Host pids of the job's own processes (at `sites`, default all), once `count` workers
    wrote their first line (a worker's own `os.getpid()` is its sandbox's, not the host's)."""
    where = sites or fed.sites
    for _ in range(600):  # bounded: 30 s (a loaded machine is slow to start a process)
        started = [p for site in where
                   for p in (fed.site_dir(site) / "work").glob(f"workers/{job_id}*/started")
                   if p.read_text()]
        if len(started) >= count:
            break
        await asyncio.sleep(0.05)
    running = [e for e in await study_events(fed, job=job_id)
               if isinstance(e, ev.WorkerRunning) and e.site in where]
    return [pid for e in running if (pid := worker_process(int(e.native_id))) is not None]


async def test_cancel_reaches_every_worker_as_sigterm(
        shared_fed: EmbeddedFederation, shared: Client, job_dir: Path) -> None:
    federation, client = shared_fed, shared
    job_id = await client.submit(write_job(job_dir, script=TERM_RECORDER))
    await wait_running(client, job_id)
    pids = await worker_pids(federation, job_id)
    assert len(pids) == 2
    await client.cancel(job_id)
    final = await client.wait(job_id, timeout=60)
    assert final.state == "aborted" and final.cause == "cancelled"
    assert {(w.cause, w.exit_code) for w in final.workers.values()} == {("cancelled", 143)}
    assert not any(alive(p) for p in pids)
    # Each worker saw the SIGTERM itself (so it could save its work), not a kill at the end.
    records = [p.read_text() for site in federation.sites for p in
               (federation.site_dir(site) / "work").glob(f"workers/{job_id}*/terminated")]
    assert records == ["SIGTERM", "SIGTERM"]


async def test_cancel_works_while_queued(shared: Client, job_dir: Path) -> None:
    client = shared
    roles = """\
        roles:
          client:
            entrypoint: python main.py
            resources: {cpus: 1, memory: 200Gi}
        """
    job_id = await client.submit(write_job(job_dir, script=SLEEPER, roles=roles))
    for _ in range(50):
        if (await client.job(job_id)).state == "queued":
            break
        await asyncio.sleep(0.1)
    queued = await client.job(job_id)
    assert queued.state == "queued" and queued.reasons
    await client.cancel(job_id)
    assert (await client.wait(job_id, timeout=10)).state == "aborted"


async def test_job_over_its_timeout_ends_with_cause_timeout(shared: Client, job_dir: Path) -> None:
    client = shared
    job_id = await client.submit(write_job(job_dir, script=SLEEPER, roles=sleeper_roles(120),
                                           extra="timeout: 3s\n"))
    final = await client.wait(job_id, timeout=40)
    assert final.state == "failed" and final.cause == "timeout"


async def test_worker_over_memory_limit_ends_with_oom(shared: Client, job_dir: Path) -> None:
    client = shared
    if memory_limit_mechanism() == "none":
        pytest.skip("no memory limit can be set here (no writable cgroup, RLIMIT_AS refused)")
    hog = "x = bytearray(1024 * 1024 * 1024)\nprint(len(x))\n"
    roles = """\
        roles:
          client:
            entrypoint: python main.py
            resources: {cpus: 1, memory: 128Mi}
            sites: [site-a]
        """
    job_id = await client.submit(write_job(job_dir, script=hog, roles=roles))
    final = await client.wait(job_id, timeout=30)
    assert final.state == "failed" and final.cause == "oom", final
    worker = next(iter(final.workers.values()))
    assert worker.cause == "oom"


async def _kill_site_parent_mid_job(federation: EmbeddedFederation, client: Client,
                                    job_dir: Path) -> None:
    job_id = await client.submit(write_job(job_dir, script=SLEEPER, roles=sleeper_roles(4)))
    await wait_running(client, job_id)
    pids = await worker_pids(federation, job_id)
    assert len(pids) == 2
    federation.kill("site-site-a")  # the agent and the launcher of site-a, by SIGKILL
    # Its parent is reaped; its workers still run (and below, exit 0 after their 4 s: no
    # signal reached them).
    assert all(alive(p) for p in pids), "workers outlive their parent"
    federation.respawn("site-site-a")
    final = await client.wait(job_id, timeout=60)
    assert final.state == "completed", final
    events = await study_events(federation, job=job_id)
    launches = [e for e in events if isinstance(e, ev.WorkerLaunching)]
    exits = [e for e in events if isinstance(e, ev.WorkerExited)]
    assert len(launches) == 2, "nothing is launched twice"
    assert sorted(e.site for e in exits) == ["site-a", "site-b"]
    assert all(e.exit_code == 0 for e in exits)
    starts = [p for s in federation.sites for p in (federation.site_dir(s) / "work").glob(
        f"workers/{job_id}*/started")]
    assert len(starts) == 2


async def test_launcher_and_agent_killed_mid_job_reconcile(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    await _kill_site_parent_mid_job(federation, client, job_dir)


async def test_worker_ending_while_launcher_is_down_is_reported(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    job_id = await client.submit(write_job(job_dir, script=SLEEPER, roles=sleeper_roles(1)))
    await wait_running(client, job_id)
    [pid] = await worker_pids(federation, job_id, count=1, sites=("site-a",))
    federation.kill("site-site-a")
    # The worker ends while nobody watches it: wait until it has.
    deadline = time.monotonic() + 30
    while alive(pid):
        assert time.monotonic() < deadline, "the worker did not end"
        await asyncio.sleep(0.05)
    events = await study_events(federation, job=job_id)
    assert not [e for e in events if isinstance(e, ev.WorkerExited) and e.site == "site-a"]
    federation.respawn("site-site-a")
    final = await client.wait(job_id, timeout=60)
    assert final.state == "completed"
    site_a = next(w for w in final.workers.values() if w.site == "site-a")
    assert (site_a.exit_code, site_a.cause) == (0, None)
    # Its end was found by the restarted launcher's reconcile, not watched.
    log = federation.process("site-site-a").log.read_text()
    launch_id = site_a.launch_id
    assert f"worker {launch_id} ended while the launcher was down" in log, log[-2000:]


async def test_coordinator_killed_mid_job_recovers_from_replay(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    job_id = await client.submit(write_job(job_dir, script=SLEEPER, roles=sleeper_roles(3)))
    await wait_running(client, job_id)
    federation.kill("coordinator")
    federation.respawn("coordinator")
    await federation.wait_healthy(30)
    # The restarted coordinator waited out the dead one's lease, so the workers may be ending
    # now: an event landing between the two reads differs them once, a wrong fold every time.
    for _ in range(5):
        live = await client.job(job_id)
        view, _ = await client.replay()
        if view.jobs[job_id] == live:
            break
    assert view.jobs[job_id] == live
    final = await client.wait(job_id, timeout=60)
    assert final.state == "completed", (final.cause, final.message, final.workers)
    view, _ = await client.replay()
    assert view.jobs[job_id] == final
