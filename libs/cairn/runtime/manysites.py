"""`cairn sim-sites --sites N --jobs M`: one real coordinator driven by N simulated sites.

The federation is an embedded one (`cairn.runtime.embedded`), secure by default: a private
nats-server, the authority, and the hub's parent (coordinator, validator, signer and the
hub's own services). Its N other sites are simulated (`cairn.runtime.simsite`), many to a
process, each with its own provisioned credential. M one-worker jobs are submitted as an
admin (signed requests), spread over the sites; the run ends when every job has ended, and
checks that every job completed and that the coordinator's state equals the fold of the
study's stream (`cairn replay`).

Two phases. With `--backlog B`, once the coordinator sees every site online with free
capacity, the study's queue is held (`cairn study hold`) and B jobs are submitted, so they
queue; then the queue is released and the coordinator dispatches the backlog as fast as it
can: that is the dispatch rate (jobs per second, from the release to the last
`job.dispatched`, as the stream stored them), free of the rate at which one client submits
and of the coordinator learning the sites' capacity. Then `--jobs M` jobs flow:
their decision latency is `job.submitted` to `job.dispatched`, both stamped by the
coordinator. The CPU and memory of the coordinator's process are read from /proc.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from cairn.errors import InvalidInput, Timeout
from cairn.runtime.embedded import DEFAULT_ADMIN, DEFAULT_STUDY, EmbeddedFederation
from cairn.runtime.sim import HUB, prepare_dir, sim_sites

MAX_SITES = 20000
SITES_PER_PROCESS = 250
IN_FLIGHT = 32
"""Submit requests in flight at once (the coordinator checks each signature and nonce)."""
IDLE_S = 5.0
"""Seconds of heartbeats only, over which the coordinator's idle CPU is read."""
TERMINAL = ("job.completed", "job.failed", "job.aborted", "job.unschedulable")
Say = Callable[[str], None]
Check = Callable[["SimulatedFederation"], Awaitable[None]]


@dataclass
class ManySitesReport:
    """What one run of `cairn sim-sites` saw."""

    sites: int
    jobs: int
    backlog: int
    completed: int
    with_results: int
    """Jobs whose worker reported a result (0 without --worker-reports)."""
    not_completed: dict[str, str]
    """Job id -> its end state, for every job that did not complete."""
    state_equals_replay: bool
    start_s: float
    """Federation start until every service answered healthy."""
    submit_s: float
    """First submit to the last job's end."""
    dispatch_per_s: float
    """Backlog jobs dispatched per second, from the queue's release to the last
    `job.dispatched` (0: no backlog)."""
    release_to_first_ms: float
    """The queue's release to the backlog's first `job.dispatched` (0: no backlog)."""
    flow_dispatch_per_s: float
    """Flowing jobs dispatched per second (bounded by the submit rate)."""
    decision_p50_ms: float
    decision_p99_ms: float
    coordinator_cpu_s: float
    """CPU time of the coordinator's process (user + system) over both phases."""
    coordinator_idle_cpu_pct: float
    """CPU of the coordinator's process while the sites only heartbeat, in % of a core."""
    coordinator_rss_bytes: int
    processes: int
    secure: bool
    dir: str
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SimulatedFederation(EmbeddedFederation):
    """An embedded federation whose sites but the hub are simulated sites."""

    simsite_options: dict[str, str] = field(default_factory=dict)

    def _spawn_grouped(self) -> None:
        from cairn.runtime._parents import spawn_grouped

        spawn_grouped(self, services=("simsite",), options=self.simsite_options,
                      prefix="simsites")


def simulated_federation(folder: Path, n_sites: int, *, secure: bool = True,
                         heartbeat_s: float = 2.0, run_s: float = 0.0,
                         worker_reports: bool = True,
                         sites_per_process: int = SITES_PER_PROCESS) -> SimulatedFederation:
    """The federation of a run (not started).

    Raises:
        InvalidInput: `n_sites` out of range.
    """
    if not 1 <= n_sites <= MAX_SITES:
        raise InvalidInput(f"--sites {n_sites}: simulate 1 to {MAX_SITES} sites",
                           field="--sites")
    options = {"simsite_run_s": str(run_s),
               "simsite_worker_reports": "on" if worker_reports else "off"}
    return SimulatedFederation(dir=folder, sites=sim_sites(n_sites), study=DEFAULT_STUDY,
                               secure=secure, heartbeat_s=heartbeat_s,
                               sites_per_process=max(2, sites_per_process),
                               simsite_options=options)


def run_many_sites(folder: Path, n_sites: int, n_jobs: int, *, backlog: int = 0,
                   secure: bool = True,
                   heartbeat_s: float = 2.0, run_s: float = 0.0, worker_reports: bool = True,
                   sites_per_process: int = SITES_PER_PROCESS, timeout: float = 600.0,
                   check: Check | None = None, say: Say = print) -> ManySitesReport:
    """Start the federation in `folder`, run `n_jobs` jobs on `n_sites` simulated sites,
    stop it; the report. `check(fed)`, when given, runs once every service is healthy
    (a test's own probes of the running federation).

    Raises:
        InvalidInput: bad --sites, --jobs or --dir.
        Timeout: the federation did not become healthy, or the jobs did not end, in time.
    """
    for flag, value in (("--jobs", n_jobs), ("--backlog", backlog)):
        if value < 0:
            raise InvalidInput(f"{flag} {value}: give 0 or more", field=flag)
    fed = simulated_federation(folder, n_sites, secure=secure, heartbeat_s=heartbeat_s,
                               run_s=run_s, worker_reports=worker_reports,
                               sites_per_process=sites_per_process)
    prepare_dir(folder)
    t0 = time.monotonic()
    say(f"starting a {'secure' if secure else 'INSECURE'} federation of {n_sites} simulated "
        f"sites in {folder}")
    fed.start(fork=True)
    try:
        return asyncio.run(_drive(fed, n_jobs, backlog, timeout, t0, say, check))
    finally:
        fed.stop()


async def _drive(fed: SimulatedFederation, n_jobs: int, n_backlog: int, timeout: float,
                 t0: float, say: Say, check: Check | None) -> ManySitesReport:
    from cairn.client import Client
    from cairn.runtime.context import Context

    told = {"at": 0.0}

    def health(ready: int, total: int) -> None:
        if ready == total or time.monotonic() - told["at"] > 5.0:
            told["at"] = time.monotonic()
            say(f"{ready}/{total} services healthy ({time.monotonic() - t0:.1f}s)")

    await fed.wait_healthy(max(180.0, 0.5 * len(fed.sites)), progress=health)
    start_s = time.monotonic() - t0
    if check is not None:
        await check(fed)
    assert fed.nats is not None
    auth = fed.client_options()
    client = await Client.connect(Context(nats_url=fed.nats.url, study=fed.study,
                                          actor=DEFAULT_ADMIN, creds=auth.get("creds"),
                                          tls_ca=auth.get("tls_ca")))
    coordinator = fed.process("coordinator").proc.pid
    sites = [s for s in fed.sites if s != HUB]
    try:
        idle = await idle_cpu_pct(coordinator, IDLE_S)
        cpu0 = cpu_seconds(coordinator)
        t_submit = time.monotonic()
        held: list[str] = []
        if n_backlog:
            await wait_capacity(client, sites, timeout, say)
            await client.study_hold(True, "cairn sim-sites: a backlog is queued")
            held = await submit_jobs(client, sites, n_backlog, say)
            await wait_for(client, set(held), ("job.queued",), timeout, say, "queued")
            await client.study_hold(False)
            say(f"{n_backlog} jobs queued; the queue is released")
            await wait_for(client, set(held), TERMINAL, timeout, say, "ended")
        flowing = await submit_jobs(client, sites, n_jobs, say)
        await wait_for(client, set(flowing), TERMINAL, timeout, say, "ended")
        submit_s = time.monotonic() - t_submit
        cpu = cpu_seconds(coordinator) - cpu0
        rss = rss_bytes(coordinator)
        stored = await stored_times(fed)
        report = await judge(client, held, flowing, stored)
    finally:
        await client.close()
    return ManySitesReport(
        sites=len(fed.sites) - 1, jobs=n_jobs, backlog=n_backlog, start_s=round(start_s, 2),
        submit_s=round(submit_s, 2), coordinator_cpu_s=round(cpu, 2),
        coordinator_idle_cpu_pct=idle, coordinator_rss_bytes=rss,
        processes=len(fed.processes), secure=fed.secure, dir=str(fed.dir), **report)


async def wait_capacity(client: Any, sites: list[str], timeout: float, say: Say) -> None:
    """Until the coordinator sees every site online with free capacity (one `site show`
    each, `IN_FLIGHT` at a time: a list of thousands does not fit in one reply).

    Raises:
        Timeout: naming how many were not.
    """
    gate = asyncio.Semaphore(IN_FLIGHT)
    left = list(sites)
    deadline = time.monotonic() + timeout

    async def ready(site: str) -> bool:
        async with gate:
            info = await client.site(site)
        return bool(info.online and info.free is not None and info.free.millicpus > 0)

    while left:
        answers = await asyncio.gather(*(ready(s) for s in left))
        left = [s for s, ok in zip(left, answers, strict=True) if not ok]
        if left:
            if time.monotonic() > deadline:
                raise Timeout(f"{len(left)} of {len(sites)} sites showed no free capacity "
                              f"within {timeout:g}s")
            say(f"{len(sites) - len(left)}/{len(sites)} sites have capacity")
            await asyncio.sleep(1.0)  # the next heartbeats
    say(f"every one of {len(sites)} sites has capacity")


async def idle_cpu_pct(pid: int, seconds: float) -> float:
    """The process's CPU over `seconds` of wall time, in % of one core."""
    before, t = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(seconds)
    return round(100.0 * (cpu_seconds(pid) - before) / (time.monotonic() - t), 1)


def one_job(site: str, index: int) -> Any:
    """A one-worker job pinned to `site` (the request a client sends)."""
    from cairn.api import JobRequest
    from cairn.events import Resources, RoleRequest

    return JobRequest(name=f"sim-{index}", roles=[RoleRequest(
        name="work", entrypoint="simulated", resources=Resources(millicpus=100,
                                                                 memory_bytes=1 << 20),
        sites=[site])], timeout_s=3600.0, queue_timeout_s=3600.0)


async def submit_jobs(client: Any, sites: list[str], n_jobs: int, say: Say) -> list[str]:
    """Submit `n_jobs` jobs round-robin over `sites`, `IN_FLIGHT` at a time; their ids."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    done = {"n": 0, "at": time.monotonic()}

    async def one(index: int) -> str:
        async with gate:
            job = str(await client.submit_request(one_job(sites[index % len(sites)], index)))
        done["n"] += 1
        if time.monotonic() - done["at"] > 5.0:
            done["at"] = time.monotonic()
            say(f"{done['n']}/{n_jobs} submitted")
        return job

    return list(await asyncio.gather(*(one(i) for i in range(n_jobs))))


async def wait_for(client: Any, ids: set[str], types: tuple[str, ...], timeout: float,
                   say: Say, what: str) -> None:
    """Follow the study's stream until every job of `ids` has an event of `types`.

    Raises:
        Timeout: naming how many had not.
    """
    left = set(ids)
    if not left:
        return
    told = time.monotonic()
    async for entry in client.events(tail=None, follow=True, poll=0.2, timeout=timeout):
        if entry.type in types and entry.job in left:
            left.discard(entry.job)
            if not left:
                return
        if time.monotonic() - told > 5.0:
            told = time.monotonic()
            say(f"{len(ids) - len(left)}/{len(ids)} jobs {what}")
    raise Timeout(f"{len(left)} of {len(ids)} jobs were not {what} within {timeout:g}s")


async def stored_times(fed: SimulatedFederation) -> dict[tuple[str, str], float]:
    """(job, `job.submitted` | `job.dispatched`) -> when the stream stored it (UNIX time);
    ("", "released") -> when the study's queue was last released.

    The events' own `at` will not do for a rate: one tick's decisions share one moment."""
    from cairn import subjects
    from cairn.bus import replay
    from cairn.events import STUDY_DECODER, JobDispatched, JobSubmitted, StudyHold

    bus = await fed.bus("cairn-sim-sites")
    out: dict[tuple[str, str], float] = {}
    try:
        async for item in replay(bus, subjects.study_stream(fed.study).name, STUDY_DECODER,
                                 filters=[subjects.study_jobs(fed.study),
                                          subjects.study_admin(fed.study, "hold")]):
            if isinstance(item.event, StudyHold) and not item.event.held and item.time:
                out[("", "released")] = item.time.timestamp()
            elif isinstance(item.event, JobSubmitted | JobDispatched) and item.time:
                kind = "job.submitted" if isinstance(item.event, JobSubmitted) else \
                    "job.dispatched"
                out[(item.event.job, kind)] = item.time.timestamp()
    finally:
        await bus.close()
    return out


async def judge(client: Any, held: list[str], flowing: list[str],
                stored: dict[tuple[str, str], float]) -> dict[str, Any]:
    """Each job's end, the flowing jobs' decision latency, both dispatch rates (from the
    times the stream stored each event), and whether the coordinator's state equals the
    fold of the stream."""
    ids = [*held, *flowing]
    live = await coordinator_jobs(client, ids)
    replayed, _ = await client.replay()
    equal = (set(live) == set(replayed.jobs) and all(
        msgspec.to_builtins(live[k]) == msgspec.to_builtins(replayed.jobs[k]) for k in live))
    wanted = [replayed.jobs[j] for j in ids if j in replayed.jobs]
    not_completed = {j.job: j.state for j in wanted if j.state != "completed"}
    not_completed.update({j: "missing" for j in ids if j not in replayed.jobs})
    backlog = sorted(stored[(j, "job.dispatched")] for j in held
                     if (j, "job.dispatched") in stored)
    released = stored.get(("", "released"))
    latencies = sorted(1000.0 * (stored[(j, "job.dispatched")] - stored[(j, "job.submitted")])
                       for j in flowing if (j, "job.dispatched") in stored
                       and (j, "job.submitted") in stored)
    return {"completed": sum(1 for j in wanted if j.state == "completed"),
            "not_completed": not_completed, "state_equals_replay": equal,
            "with_results": sum(1 for j in wanted if j.results),
            "dispatch_per_s": rate(backlog, since=released),
            "release_to_first_ms": round(1000.0 * (backlog[0] - released), 1)
            if backlog and released else 0.0,
            "flow_dispatch_per_s": rate([stored[(j, "job.dispatched")] for j in flowing
                                         if (j, "job.dispatched") in stored]),
            "decision_p50_ms": round(statistics.median(latencies), 2) if latencies else 0.0,
            "decision_p99_ms": round(percentile(latencies, 0.99), 2) if latencies else 0.0}


async def coordinator_jobs(client: Any, ids: list[str]) -> dict[str, Any]:
    """The coordinator's state of each job, one `job show` each (`job list` of thousands
    of jobs does not fit in one reply)."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(job: str) -> Any:
        async with gate:
            return await client.job(job)

    return {j.job: j for j in await asyncio.gather(*(one(i) for i in ids))}


def rate(times: list[float], since: float | None = None) -> float:
    """Events per second: all of `times` over the span from `since` to the last, or
    without `since`, from the first to the last (the first then opens the span)."""
    dispatched = sorted(times)
    if not dispatched:
        return 0.0
    if since is not None:
        span, n = dispatched[-1] - since, len(dispatched)
    else:
        span, n = dispatched[-1] - dispatched[0], len(dispatched) - 1
    return round(n / span, 1) if span > 0 else 0.0


def percentile(ordered: list[float], q: float) -> float:
    """The `q` quantile of sorted values (nearest rank)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (0 where /proc is not there)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """A process's resident memory now (0 where /proc is not there)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


__all__ = ["ManySitesReport", "run_many_sites", "simulated_federation"]
