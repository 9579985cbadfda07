"""Laws of the reducers: a job never moves backwards; folding is a pure, splittable fold."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn import events as ev
from cairn.state import job as job_state
from cairn.state import view
from cairn.state.job import JOB_ORDER, WORKER_ORDER

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STUDY = "demo"
JOB = "j-1"


def base(i: int) -> dict[str, object]:
    return {"id": f"e{i}", "at": T0 + timedelta(seconds=i), "source": "test@hub",
            "study": STUDY}


SUBMITTED = ev.JobSubmitted(**base(0), job=JOB, name="x",  # type: ignore[arg-type]
                            roles=[ev.RoleRequest(name="client", entrypoint="python x")])


def make(kind: str, i: int) -> object:
    b = base(i)
    w = {"job": JOB, "site": "site-a", "role": "client", "rank": 0, "launch_id": "l"}
    return {
        "queued": lambda: ev.JobQueued(**b, job=JOB),
        "dispatched": lambda: ev.JobDispatched(**b, job=JOB, deployments=[
            ev.Deployment(site="site-a", role="client")]),
        "running": lambda: ev.JobRunning(**b, job=JOB),
        "ending": lambda: ev.JobEnding(**b, job=JOB, end_grace_s=30.0, waiting=["site-a/client/0"]),
        "completed": lambda: ev.JobCompleted(**b, job=JOB),
        "failed": lambda: ev.JobFailed(**b, job=JOB, reason="crashed"),
        "aborted": lambda: ev.JobAborted(**b, job=JOB),
        "cancel": lambda: ev.JobCancelRequested(**b, job=JOB),
        "accepted": lambda: ev.DeploymentAccepted(**b, **w),
        "rejected": lambda: ev.DeploymentRejected(**b, job=JOB, site="site-a", role="client",
                                                  reason="site-policy", message="no"),
        "launching": lambda: ev.WorkerLaunching(**b, **w, backend="process"),
        "w-running": lambda: ev.WorkerRunning(**b, **w),
        "exited": lambda: ev.WorkerExited(**b, **w, exit_code=0),
    }[kind]()  # type: ignore[no-any-return]


KINDS = ["queued", "dispatched", "running", "ending", "completed", "failed", "aborted", "cancel",
         "accepted", "rejected", "launching", "w-running", "exited"]
histories = st.lists(st.sampled_from(KINDS), max_size=25).map(
    lambda kinds: [SUBMITTED, *(make(k, i + 1) for i, k in enumerate(kinds))])


@settings(max_examples=300, deadline=None)
@given(histories)
def test_a_job_never_moves_backwards(events: list[object]) -> None:
    state = None
    for event in events:
        new = job_state.apply(state, event)
        if state is not None and new is not None:
            assert JOB_ORDER[new.state] >= JOB_ORDER[state.state]
            if state.terminal:
                assert new.state == state.state
            for key, w in state.workers.items():
                assert WORKER_ORDER[new.workers[key].state] >= WORKER_ORDER[w.state] or \
                    w.state == "rejected"
        state = new


@settings(max_examples=200, deadline=None)
@given(histories, st.integers(min_value=0, max_value=30))
def test_folding_at_once_equals_folding_in_parts(events: list[object], cut: int) -> None:
    whole = view.fold(events)
    head = view.fold(events[:cut])
    assert view.fold(events[cut:], head) == whole
    assert functools.reduce(view.apply, events, view.StudyView()) == whole


@settings(max_examples=100, deadline=None)
@given(histories)
def test_replaying_an_event_twice_changes_nothing_after_the_end(events: list[object]) -> None:
    once = view.fold(events)
    job = once.jobs.get(JOB)
    if job is not None and job.terminal:
        assert view.fold([*events, *events[1:]]) .jobs[JOB].state == job.state
