"""Whether a worker the launcher found unrecorded has work left (`cairn.launcher.orphans`):
its job folded to a terminal state, or a later attempt of the same worker, means no."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cairn import events as ev
from cairn.launcher.orphans import verdict
from cairn.state.launch import LaunchState

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JOB = "j-orphan"


def base(i: int) -> dict[str, Any]:
    return {"id": f"e{i}", "at": AT, "source": "test@hub", "study": "demo"}


def launch(attempt: int = 0) -> LaunchState:
    return LaunchState(launch_id=f"{JOB}/site-a/client/0/{attempt}", study="demo", job=JOB,
                       site="site-a", role="client", rank=0, attempt=attempt,
                       state="launching")


def history() -> list[object]:
    roles = [ev.RoleRequest(name="client", entrypoint="python c")]
    return [ev.JobSubmitted(**base(0), job=JOB, name="fl", roles=roles),
            ev.JobDispatched(**base(1), job=JOB, deployments=[
                ev.Deployment(site="site-a", role="client"),
                ev.Deployment(site="site-b", role="client", rank=1)]),
            ev.JobRunning(**base(2), job=JOB)]


def launching(site: str, rank: int, attempt: int) -> ev.WorkerLaunching:
    return ev.WorkerLaunching(**base(10 + attempt + rank), job=JOB, site=site, role="client",
                              rank=rank, attempt=attempt, backend="slurm",
                              launch_id=f"{JOB}/{site}/client/{rank}/{attempt}")


def test_a_running_job_keeps_its_worker() -> None:
    assert verdict(history(), launch()) is None
    assert verdict([], launch()) is None  # nothing read: never cancelled on a guess


def test_a_job_that_ended_orphans_its_worker() -> None:
    failed = ev.JobFailed(**base(3), job=JOB, reason="crashed", message="site-b crashed")
    assert verdict([*history(), failed], launch()) == "job over: failed"
    aborted = ev.JobAborted(**base(3), job=JOB, reason="cancelled")
    assert verdict([*history(), aborted], launch()) == "job over: aborted"


def test_a_later_attempt_of_the_same_worker_supersedes_it() -> None:
    assert verdict([*history(), launching("site-a", 0, 1)], launch()) == \
        "superseded by attempt 1"
    # Another worker's later attempt, or its own attempt again, supersedes nothing.
    assert verdict([*history(), launching("site-b", 1, 2)], launch()) is None
    assert verdict([*history(), launching("site-a", 0, 1)], launch(attempt=1)) is None
