"""A study's held queue, pure: the fold of `study.hold` and the coordinator's decision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cairn.coordinator.decide import Context, SiteStatus, decide_job
from cairn.events import (
    JobDispatched,
    JobQueued,
    JobSubmitted,
    JobUnschedulable,
    Resources,
    RoleRequest,
    StudyCreated,
    StudyHold,
)
from cairn.state import job as job_state
from cairn.state import study as study_state
from cairn.state.study import StudyState

T = datetime(2026, 1, 1, tzinfo=UTC)
BASE = {"source": "coordinator@hub", "study": "demo"}


def study(*holds: tuple[bool, str, float]) -> StudyState:
    """Study `demo` after `study.hold` events (held, reason, seconds after T)."""
    state = study_state.apply(None, StudyCreated(id="c", at=T, name="demo",
                                                 sites=["hub", "site-a"], **BASE))
    for i, (held, reason, at) in enumerate(holds):
        state = study_state.apply(state, StudyHold(id=f"h{i}", at=T + timedelta(seconds=at),
                                                   held=held, reason=reason, **BASE))
    assert state is not None
    return state


def job(queue_timeout_s: float = 60.0) -> job_state.JobState:
    state = job_state.apply(None, JobSubmitted(
        id="s", at=T, job="j-1", name="x", queue_timeout_s=queue_timeout_s,
        roles=[RoleRequest(name="work", entrypoint="x", resources=Resources(millicpus=100),
                           sites=["site-a"])], **BASE))
    assert state is not None
    return state


def ctx(after_s: float, free: Resources) -> Context:
    return Context(now=T + timedelta(seconds=after_s), hub="hub",
                   sites={"site-a": SiteStatus(name="site-a", online=True, free=free)})


FREE = Resources(millicpus=4000)
NONE = Resources.zero()


def test_the_fold_keeps_the_first_hold_and_dates_the_release() -> None:
    held = study((True, "maintenance", 1), (True, "again", 2))
    assert (held.held, held.hold_reason, held.released_at) == (True, "maintenance", None)
    released = study((True, "maintenance", 1), (False, "", 5))
    assert (released.held, released.hold_reason) == (False, "")
    assert released.released_at == T + timedelta(seconds=5)


def test_a_held_study_queues_with_its_reason_and_dispatches_nothing() -> None:
    held = study((True, "maintenance", 0))
    decided = decide_job(job(), held, ctx(1, FREE))
    assert [type(e) for e in decided] == [JobQueued]
    assert decided[0].reasons == {"study": "the study's queue is held: maintenance"}
    queued = job_state.apply(job(), decided[0])
    assert queued is not None
    # Held for longer than the job's queue timeout: still waiting, not unschedulable.
    assert decide_job(queued, held, ctx(3600, FREE)) == []
    released = study((True, "maintenance", 0), (False, "", 3600))
    assert isinstance(decide_job(queued, released, ctx(3601, FREE))[0], JobDispatched)


def test_a_release_starts_the_queue_timeout_again() -> None:
    queued = job_state.apply(job(), decide_job(job(), study(), ctx(1, NONE))[0])
    assert queued is not None and queued.state == "queued"
    never_held = study()
    assert isinstance(decide_job(queued, never_held, ctx(61, NONE))[0], JobUnschedulable)
    released = study((True, "", 10), (False, "", 30))
    assert decide_job(queued, released, ctx(61, NONE)) == []
    assert isinstance(decide_job(queued, released, ctx(91, NONE))[0], JobUnschedulable)
