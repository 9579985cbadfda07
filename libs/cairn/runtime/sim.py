"""`cairn sim JOB --sites N`: a job on N simulated sites of one machine, as a real federation.

The simulation is an embedded federation (`cairn.runtime.embedded`) with a hub and sites
`site-1` ... `site-N` (the names FLARE's simulator gives its clients): a private
nats-server, the coordinator, and for every site its agent and launcher with the site's own
credential, secure by default (TLS and the authority; `insecure=True` only for
development). The job runs exactly as on `cairn up`: the same job spec, the same worker
code started by the same process backend (sandboxed where bwrap is), the same events in
the same stream, so `cairn job show`, `cairn replay` and the dashboard read it as any job.

What makes 100 sites cheap: the sites' services run 50 to a process
(`cairn.runtime.sites`), the launchers of a process share one warm interpreter that forks
each worker with the SDK already imported, and site parents run no snapshotter.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cairn.errors import CairnError, InvalidInput, Timeout, Unavailable
from cairn.runtime.embedded import DEFAULT_STUDY, EmbeddedFederation
from cairn.runtime.procmem import PeakMemory
from cairn.spec.job import JobSpec, load_job_spec

HUB = "hub"
MARKER = "sim.json"
SIM_SERVICES = ("agent", "launcher")
SITES_PER_PROCESS = 50
MAX_SIM_SITES = 1000
Say = Callable[[str], None]


def sim_sites(n: int) -> tuple[str, ...]:
    """The hub, then `site-1` ... `site-N`."""
    return (HUB, *(f"site-{i}" for i in range(1, n + 1)))


def check_job(spec: JobSpec, sites: Sequence[str], file: str) -> None:
    """A role may name only simulated sites; `min_sites` must fit in them.

    Raises:
        InvalidInput: naming the role and the field.
    """
    clients = [s for s in sites if s != HUB]
    for name, role in spec.roles.items():
        if role.placement == "hub":
            continue
        if role.sites != "all":
            unknown = [s for s in role.sites if s not in clients]
            if unknown:
                raise InvalidInput(
                    f"role {name} names {', '.join(unknown)}, which the simulation does not "
                    f"have: its sites are site-1 ... site-{len(clients)} (write `sites: all`, "
                    "or name those)", file=file, field=f"roles.{name}.sites")
        chosen = len(clients) if role.sites == "all" else len(role.sites)
        if role.min_sites is not None and role.min_sites > chosen:
            raise InvalidInput(f"role {name} needs min_sites {role.min_sites} but runs at "
                               f"{chosen} simulated sites (raise --sites)", file=file,
                               field=f"roles.{name}.min_sites")


@dataclass
class SimReport:
    """What one simulation did."""

    job: str
    state: str
    message: str
    sites: int
    dir: str
    secure: bool
    start_s: float
    """Federation start until every service answered healthy."""
    job_s: float
    """Submit until the job ended."""
    round_s: list[float] = field(default_factory=list)
    """Per round of the server role (its progress steps), in seconds."""
    peak_rss_bytes: int = 0
    peak_pss_bytes: int = 0
    peak_processes: int = 0
    results: dict[str, Any] = field(default_factory=dict)
    """`role@site` -> the result value each worker returned (`w.result(value)`)."""
    context: str | None = None
    """With `keep`: the context file that reaches the still running federation."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def prepare_dir(folder: Path) -> None:
    """A fresh simulation folder: one made by an earlier `cairn sim` is cleared.

    Raises:
        InvalidInput: the folder holds something `cairn sim` did not make.
    """
    if folder.exists() and any(folder.iterdir()):
        if not (folder / MARKER).exists():
            raise InvalidInput(f"{folder} is not empty and not a cairn sim folder (no {MARKER}); "
                               "give another --dir", field="--dir")
        from cairn.runtime.dirlock import DirLock

        DirLock.acquire(folder).release()  # a simulation still running there: Conflict
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text(json.dumps({"made_by": "cairn sim"}))


def run_setup(command: str, fed: EmbeddedFederation, say: Say) -> None:
    """Run the user's `--setup` command once the sites' folders exist ({sites_dir}, {hub}).

    Raises:
        CairnError: it failed (its exit status), or timed out.
    """
    argv = [a.replace("{sites_dir}", str(fed.dir / "sites")).replace("{hub}", fed.hub)
            for a in shlex.split(command)]
    say(f"setup: {shlex.join(argv)}")
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CairnError(f"--setup {argv[0]}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise CairnError(f"--setup exited {done.returncode}: {' / '.join(tail)}")


def simulate(job_file: Path, n_sites: int, folder: Path, *, secure: bool = True,
             sets: Sequence[str] = (), setup: str | None = None, timeout: float = 3600.0,
             sites_per_process: int = SITES_PER_PROCESS, keep: Callable[[SimReport], None]
             | None = None, say: Say = print) -> SimReport:
    """Run `job_file` on `n_sites` simulated sites; the federation stops at the end, or
    after `keep(report)` returns when given (it keeps the federation up meanwhile).

    Raises:
        InvalidInput: a bad job spec, --sites or --dir.
        Conflict: a simulation already runs in `folder` (`cairn.runtime.dirlock`).
        Timeout: the job did not end within `timeout`.
    """
    if not 1 <= n_sites <= MAX_SIM_SITES:
        raise InvalidInput(f"--sites {n_sites}: simulate 1 to {MAX_SIM_SITES} sites",
                           field="--sites")
    spec = load_job_spec(job_file)
    sites = sim_sites(n_sites)
    check_job(spec, sites, str(job_file))
    prepare_dir(folder)
    fed = EmbeddedFederation(dir=folder, sites=sites, study=spec.study or DEFAULT_STUDY,
                             secure=secure, heartbeat_s=1.0, sites_per_process=sites_per_process,
                             site_services=SIM_SERVICES)
    memory = PeakMemory(lambda: [p.proc.pid for p in fed.processes])
    t0 = time.monotonic()
    say(f"starting a {'secure' if secure else 'INSECURE'} federation of {n_sites} sites "
        f"in {folder}")
    fed.start(fork=True)  # before any event loop runs here: the hub's parent is forked
    try:
        with memory:
            report = asyncio.run(_drive(fed, job_file, sets, setup, timeout, t0, say))
            memory.sample()
        report.peak_rss_bytes = memory.peak.rss_bytes
        report.peak_pss_bytes = memory.peak.pss_bytes
        report.peak_processes = memory.peak.processes
        if keep is not None:
            report.context = str(fed.write_context(folder / "context.yaml"))
            keep(report)
        return report
    finally:
        fed.stop()


async def _drive(fed: EmbeddedFederation, job_file: Path, sets: Sequence[str],
                 setup: str | None, timeout: float, t0: float, say: Say) -> SimReport:
    from cairn.client import Client
    from cairn.runtime.context import Context
    from cairn.runtime.embedded import DEFAULT_ADMIN

    told = {"at": 0.0}

    def health(ready: int, total: int) -> None:
        if ready == total or time.monotonic() - told["at"] > 2.0:
            told["at"] = time.monotonic()
            say(f"{ready}/{total} services healthy ({time.monotonic() - t0:.1f}s)")

    await fed.wait_healthy(max(60.0, 0.5 * len(fed.sites)), progress=health)
    start_s = time.monotonic() - t0
    say(f"federation healthy in {start_s:.1f}s")
    if setup:
        await asyncio.to_thread(run_setup, setup, fed, say)
    assert fed.nats is not None
    auth = fed.client_options()
    client = await Client.connect(Context(nats_url=fed.nats.url, study=fed.study,
                                          actor=DEFAULT_ADMIN, creds=auth.get("creds"),
                                          tls_ca=auth.get("tls_ca")))
    try:
        t_submit = time.monotonic()
        job_id = await _submit(client, job_file, sets, say)
        say(f"submitted {job_id}")
        final, marks = await _watch(client, job_id, timeout, say)
        job_s = time.monotonic() - t_submit
    finally:
        await client.close()
    rounds = await round_walls(fed, job_id) or marks
    say(f"{job_id} {final.state} in {job_s:.1f}s")
    return SimReport(job=job_id, state=final.state, message=final.message,
                     sites=len(fed.sites) - 1, dir=str(fed.dir), secure=fed.secure,
                     start_s=round(start_s, 3), job_s=round(job_s, 3),
                     round_s=[round(r, 3) for r in rounds],
                     results={f"{r.role}@{r.site}": r.value for r in final.results})


async def _submit(client: Any, job_file: Path, sets: Sequence[str], say: Say) -> str:
    """Submit; a request refused because the federation was too busy to check it
    (`Unavailable`: nothing was submitted) is made again, twice at most."""
    for attempt in range(3):
        try:
            return str(await client.submit(job_file, sets))
        except Unavailable as exc:
            if attempt == 2:
                raise
            say(f"submit refused ({exc}); again")
            await asyncio.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


async def round_walls(fed: EmbeddedFederation, job_id: str) -> list[float]:
    """The server role's `wall_s` per round, from its metric events (`cairn.worker.rounds`
    publishes one per round); empty for a job whose server reports none."""
    from cairn import subjects
    from cairn.bus import replay
    from cairn.events import STUDY_DECODER, WorkerMetric

    bus = await fed.bus("cairn-sim")
    walls: dict[int, float] = {}
    try:
        async for r in replay(bus, subjects.study_stream(fed.study).name, STUDY_DECODER,
                              filters=[subjects.job_all(fed.study, job_id)]):
            e = r.event
            if (isinstance(e, WorkerMetric) and e.role == "server" and e.step is not None
                    and "wall_s" in e.values):
                walls[e.step] = e.values["wall_s"]
    finally:
        await bus.close()
    return [walls[k] for k in sorted(walls)]


async def _watch(client: Any, job_id: str, timeout: float, say: Say) -> tuple[Any, list[float]]:
    """Follow the job until it ends: a line whenever the workers' states or the server's
    round change; the server role's round times from its progress steps."""
    deadline = time.monotonic() + timeout
    marks: dict[int, float] = {}
    last = ""
    while True:
        job = await client.job(job_id)
        hub_workers = [w for w in job.workers.values() if w.role == "server"]
        for w in hub_workers:
            if w.step is not None and w.step not in marks:
                marks[w.step] = time.monotonic()
        counts: dict[str, int] = {}
        for w in job.workers.values():
            counts[w.state] = counts.get(w.state, 0) + 1
        line = (f"{job.state}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                + "".join(f"; server {w.progress}" for w in hub_workers if w.progress))
        if line != last:
            say(line)
            last = line
        if job.terminal:
            steps = sorted(marks)
            return job, [marks[b] - marks[a] for a, b in itertools.pairwise(steps)]
        if time.monotonic() > deadline:
            raise Timeout(f"{job_id} did not end within {timeout:g}s (still {job.state})")
        await asyncio.sleep(0.25)

