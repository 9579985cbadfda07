"""Many sites (`make bench`, section `scale-sites`): one coordinator, thousands of sites.

- `federation`: per size in `CAIRN_BENCH_SITES` (default `1000`; `1000,10000` for both),
  `cairn sim-sites` (`cairn.runtime.manysites`) on a secure federation of simulated sites:
  the dispatch rate on a backlog (jobs queued while the sites are closed, then dispatched
  at once), the decision latency of jobs that flow (p50, p99), and the coordinator
  process's CPU and memory, per 1,000 sites.
- `decide`: the coordinator's own decision path in this process, no bus: `decide_job` for
  a queued one-worker job with the context a coordinator of N sites builds (`SiteBoard`),
  as decisions per second, at 1,000 and 10,000 sites.

`run()` returns the section for `tools/bench.py`; progress goes to stderr.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BACKLOG = int(os.environ.get("CAIRN_BENCH_BACKLOG", "2000"))
FLOWING = int(os.environ.get("CAIRN_BENCH_FLOWING", "300"))
DECIDE_JOBS = 5000


def _say(line: str) -> None:
    print(f"bench scale-sites: {line}", file=sys.stderr, flush=True)


def federation(sites: int) -> dict[str, Any]:
    from cairn.runtime.manysites import run_many_sites

    with tempfile.TemporaryDirectory(prefix="cairn-bench-sites-") as tmp:
        r = run_many_sites(Path(tmp) / "fed", sites, FLOWING, backlog=BACKLOG,
                           worker_reports=False, timeout=3600.0, say=_say)
    per_k = 1000.0 / sites
    return {"sites": sites, "backlog": BACKLOG, "flowing": FLOWING,
            "completed": r.completed, "not_completed": len(r.not_completed),
            "state_equals_replay": r.state_equals_replay, "start_s": r.start_s,
            "dispatch_per_s": r.dispatch_per_s, "release_to_first_ms": r.release_to_first_ms,
            "flow_dispatch_per_s": r.flow_dispatch_per_s,
            "decision_p50_ms": r.decision_p50_ms, "decision_p99_ms": r.decision_p99_ms,
            "coordinator_cpu_s": r.coordinator_cpu_s,
            "coordinator_idle_cpu_pct_per_1000_sites": round(
                r.coordinator_idle_cpu_pct * per_k, 2),
            "coordinator_rss_mib": round(r.coordinator_rss_bytes / 2**20, 1),
            "coordinator_rss_mib_per_1000_sites": round(
                r.coordinator_rss_bytes / 2**20 * per_k, 1)}


def decide(sites: int) -> dict[str, Any]:
    """Decisions per second of the coordinator's pure decision path at `sites` sites."""
    from cairn.coordinator.decide import Context, decide_job
    from cairn.coordinator.sites import SiteBoard
    from cairn.events import Heartbeat, JobSubmitted, Resources, RoleRequest
    from cairn.state import job as job_state
    from cairn.state.study import StudyState

    t = datetime(2026, 1, 1, tzinfo=UTC)
    names = [f"site-{i}" for i in range(1, sites + 1)]
    free = Resources(millicpus=4000, memory_bytes=8 << 30)
    beats = {n: (Heartbeat(id=f"hb-{n}", at=t, source=f"agent@{n}", site=n, seq=1,
                           capacity=free, free=free), t) for n in names}
    study = StudyState(name="demo", sites=("hub", *names))
    jobs = []
    for i in range(DECIDE_JOBS):
        submitted = JobSubmitted(
            id=f"s-{i}", at=t, source="coordinator@hub", study="demo", job=f"j-{i}",
            name="bench", roles=[RoleRequest(name="work", entrypoint="x",
                                             resources=Resources(millicpus=100),
                                             sites=[names[i % sites]])])
        state = job_state.apply(None, submitted)
        assert state is not None
        jobs.append(state)
    members = {n: "org" for n in names}
    started = time.perf_counter()
    dispatched = 0
    for job in jobs:
        ctx = Context(now=t + timedelta(seconds=1), hub="hub", sites=SiteBoard(
            members, beats, t + timedelta(seconds=1), stale_s=6.0, lost_s=30.0, since=t))
        dispatched += any(e.id.endswith(".dispatched") for e in decide_job(job, study, ctx))
    wall = time.perf_counter() - started
    return {"sites": sites, "jobs": DECIDE_JOBS, "dispatched": dispatched,
            "decisions_per_s": round(DECIDE_JOBS / wall, 1)}


def run() -> dict[str, Any]:
    sizes = [int(s) for s in os.environ.get("CAIRN_BENCH_SITES", "1000").split(",") if s]
    out: dict[str, Any] = {"decide": [decide(n) for n in (1000, 10000)]}
    out["federation"] = [federation(n) for n in sizes]
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
