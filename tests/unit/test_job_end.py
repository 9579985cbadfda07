"""How a job with a server role ends: completed only once every worker has exited, the
clients given the job's end grace to exit on their own, those past it stopped with cause
`outlived-server` (decided by the coordinator, reported by the launcher), and the whole wait
a pure fold of events, so a replay decides the same."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cairn import events as ev
from cairn.coordinator.decide import END_REPORT_S, Context, SiteStatus, decide_job
from cairn.errors import InvalidInput
from cairn.events import Resources
from cairn.spec.job import DEFAULT_END_GRACE_S, load_job_spec
from cairn.state import job as job_state
from cairn.state import launch as launch_state
from cairn.state.job import JobState

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JOB = "j-end"
STUDY = "demo"
CLIENT_SITES = ("site-a", "site-b")
GRACE = 20.0
CANCEL_GRACE = 10.0


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def base(i: int, s: float) -> dict[str, Any]:
    return {"id": f"e{i}", "at": at(s), "source": "test@hub", "study": STUDY}


def history() -> list[object]:
    """Submitted, dispatched, server and two clients running; the server exits 0 at t=10."""
    roles = [ev.RoleRequest(name="server", entrypoint="python s", placement="hub"),
             ev.RoleRequest(name="client", entrypoint="python c", min_sites=2)]
    out: list[object] = [
        ev.JobSubmitted(**base(0, 0), job=JOB, name="fl", roles=roles, end_grace_s=GRACE),
        ev.JobDispatched(**base(1, 0), job=JOB, deployments=[
            ev.Deployment(site="hub", role="server"),
            *(ev.Deployment(site=s, role="client", rank=i)
              for i, s in enumerate(CLIENT_SITES))]),
        ev.JobRunning(**base(2, 1), job=JOB)]
    for i, (site, role, rank) in enumerate(workers()):
        out.append(ev.WorkerRunning(**base(10 + i, 1), **who(site, role, rank)))
    out.append(exited("hub", "server", 0, 0, 10.0))
    return out


def workers() -> list[tuple[str, str, int]]:
    return [("hub", "server", 0), *((s, "client", i) for i, s in enumerate(CLIENT_SITES))]


def who(site: str, role: str, rank: int) -> dict[str, Any]:
    return {"job": JOB, "site": site, "role": role, "rank": rank,
            "launch_id": f"{JOB}/{site}/{role}/{rank}/0"}


def exited(site: str, role: str, rank: int, code: int, s: float,
           cause: str | None = None) -> ev.WorkerExited:
    return ev.WorkerExited(**base(100 + rank + 10 * len(site), s), **who(site, role, rank),
                           exit_code=code, reason=cause)


def ctx(s: float, lost: tuple[str, ...] = ()) -> Context:
    sites = {name: SiteStatus(name=name, online=name not in lost, free=Resources(),
                              lost=name in lost)
             for name in ("hub", *CLIENT_SITES)}
    return Context(now=at(s), hub="hub", sites=sites, cancel_grace_s=CANCEL_GRACE)


def fold(events: list[object]) -> JobState:
    job = functools.reduce(job_state.apply, events, None)
    assert job is not None
    return job


def decide_and_fold(events: list[object], s: float,
                    lost: tuple[str, ...] = ()) -> tuple[list[object], JobState]:
    """What the coordinator decides at time `s`, and the job once those events came back."""
    decided = decide_job(fold(events), None, ctx(s, lost))
    events.extend(decided)
    return decided, fold(events)


def tags(decided: list[object]) -> list[str]:
    return [ev.tag_of(e) for e in decided]  # type: ignore[arg-type]


def test_the_server_finishing_starts_a_wait_and_the_job_keeps_running() -> None:
    events = history()
    decided, job = decide_and_fold(events, 10.1)
    assert tags(decided) == ["job.ending"]
    (ending,) = decided
    assert isinstance(ending, ev.JobEnding)
    assert ending.end_grace_s == GRACE
    assert ending.waiting == ["site-a/client/0", "site-b/client/1"]
    assert job.state == "running" and job.ending_at == at(10.1)
    # Within the grace nothing more happens, however often the coordinator looks.
    for s in (10.5, 15.0, 10.1 + GRACE - 0.01):
        assert decide_job(job, None, ctx(s)) == []


def test_the_job_completes_only_when_the_last_client_has_exited() -> None:
    events = history()
    decide_and_fold(events, 10.1)
    events.append(exited("site-a", "client", 0, 0, 10.4))
    decided, job = decide_and_fold(events, 10.5)
    assert decided == [] and job.state == "running"
    events.append(exited("site-b", "client", 1, 0, 11.0))
    decided, job = decide_and_fold(events, 11.1)
    assert tags(decided) == ["job.completed"]
    assert job.state == "completed"
    assert all(w.state == "exited" and w.exit_code == 0 and w.cause is None
               for w in job.workers.values())


def test_a_client_that_outlives_the_grace_is_stopped_with_its_own_reason() -> None:
    events = history()
    decide_and_fold(events, 10.1)
    events.append(exited("site-a", "client", 0, 0, 10.4))
    decided, job = decide_and_fold(events, 10.1 + GRACE + 0.5)
    assert tags(decided) == ["cmd.cancel"]
    (stop,) = decided
    assert isinstance(stop, ev.CancelCommand)
    assert (stop.site, stop.reason, stop.grace_s) == ("site-b", "outlived-server", CANCEL_GRACE)
    assert stop.id == f"{JOB}.cancel.site-b.outlived-server"
    assert job.state == "running"
    # Decided again on the next tick: the same command (the same id: the bus drops it).
    again = decide_job(job, None, ctx(10.1 + GRACE + 1.0))
    assert [e.id for e in again] == [stop.id]  # type: ignore[attr-defined]
    events.append(exited("site-b", "client", 1, 143, 10.1 + GRACE + 1.2, "outlived-server"))
    decided, job = decide_and_fold(events, 10.1 + GRACE + 1.3)
    assert tags(decided) == ["job.completed"]
    assert job.workers["site-b/client/1"].cause == "outlived-server"


def test_a_stopped_client_whose_end_is_never_reported_does_not_hold_the_job() -> None:
    events = history()
    decide_and_fold(events, 10.1)
    last_stop = 10.1 + GRACE + CANCEL_GRACE + END_REPORT_S - 0.1
    assert tags(decide_job(fold(events), None, ctx(last_stop))) == ["cmd.cancel"] * 2
    decided, job = decide_and_fold(events, last_stop + 0.2)
    assert tags(decided) == ["job.completed"] and job.state == "completed"


def test_a_client_that_fails_after_the_server_finished_leaves_the_job_completed() -> None:
    events = history()
    decide_and_fold(events, 10.1)
    events.append(exited("site-a", "client", 0, 1, 10.3, "crashed"))
    events.append(exited("site-b", "client", 1, 0, 10.4))
    decided, job = decide_and_fold(events, 10.5)
    assert tags(decided) == ["job.completed"]
    assert job.workers["site-a/client/0"].cause == "crashed"


def test_a_client_on_a_lost_site_is_not_waited_for() -> None:
    events = history()
    decide_and_fold(events, 10.1)
    events.append(exited("site-a", "client", 0, 0, 10.4))
    decided, _ = decide_and_fold(events, 10.5, lost=("site-b",))
    assert tags(decided) == ["job.completed"]


def test_the_job_timeout_does_not_fail_a_job_whose_server_finished() -> None:
    events = history()
    submitted = events[0]
    assert isinstance(submitted, ev.JobSubmitted)
    events[0] = msgspec.structs.replace(submitted, timeout_s=12.0)
    decide_and_fold(events, 10.1)
    decided, job = decide_and_fold(events, 13.0)  # past the timeout, within the grace
    assert decided == [] and job.state == "running"


def test_a_server_still_running_is_no_ending() -> None:
    events = history()[:-1]  # the server has not exited
    assert tags(decide_job(fold(events), None, ctx(10.1))) == []


def test_a_server_that_failed_fails_the_job_and_stops_the_clients() -> None:
    events = [*history()[:-1], exited("hub", "server", 0, 1, 10.0, "crashed")]
    decided = decide_job(fold(events), None, ctx(10.1))
    assert tags(decided) == ["job.failed", "cmd.cancel", "cmd.cancel"]
    assert {e.reason for e in decided if isinstance(e, ev.CancelCommand)} == {"job failed"}


def test_the_wait_folds_the_same_at_once_and_in_parts() -> None:
    events = history()
    decide_and_fold(events, 10.1)
    decide_and_fold(events, 10.1 + GRACE + 0.5)
    events.append(exited("site-a", "client", 0, 0, 10.4))
    events.append(exited("site-b", "client", 1, 143, 40.0, "outlived-server"))
    decide_and_fold(events, 40.1)
    whole = fold(events)
    for cut in range(1, len(events)):
        head = fold(events[:cut])
        assert functools.reduce(job_state.apply, events[cut:], head) == whole
    assert whole.state == "completed" and whole.ending_at == at(10.1)


# -- the launcher's side: the stopped worker's cause ------------------------------------------

def launches(reason: str) -> launch_state.LaunchState:
    lid = f"{JOB}/site-b/client/1/0"
    folded = launch_state.fold([
        ev.LaunchRequested(**base(1, 0), launch_id=lid, job=JOB, site="site-b",
                           role="client", rank=1, entrypoint="python c"),
        ev.WorkerRunning(**base(2, 1), **who("site-b", "client", 1)),
        ev.LaunchCancel(**base(3, 30), launch_id=lid, job=JOB, site="site-b", reason=reason)])
    launch = folded.get(lid)
    assert launch is not None and launch.cancelled
    return launch


@pytest.mark.parametrize(("reason", "code", "seen", "cause"), [
    ("outlived-server", 143, "cancelled", "outlived-server"),   # SIGTERM, the backend knew
    ("outlived-server", 137, "crashed", "outlived-server"),     # SIGKILL, after a restart
    ("outlived-server", 0, None, None),                         # it exited 0 in the grace
    ("outlived-server", 1, "crashed", "crashed"),               # failed on its own
    ("cancelled", 143, "cancelled", "cancelled"),
    ("job failed", 143, "cancelled", "cancelled"),
])
def test_the_cause_of_a_stopped_worker(reason: str, code: int, seen: str | None,
                                       cause: str | None) -> None:
    assert launch_state.exit_cause(launches(reason), code, seen) == cause


def test_the_message_of_a_worker_stopped_after_the_server_says_so() -> None:
    message = launch_state.exit_message("outlived-server", "killed by SIGTERM")
    assert message.startswith("stopped after the server role finished")
    assert message.endswith("killed by SIGTERM")
    assert launch_state.exit_message("cancelled", "cancelled; x") == "cancelled; x"


# -- the spec --------------------------------------------------------------------------------

def spec_file(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "code").mkdir(exist_ok=True)
    path = tmp_path / "job.yaml"
    path.write_text("name: fl\ncode: code\nroles:\n  server:\n    entrypoint: python s\n"
                    + extra, encoding="utf-8")
    return path


def test_the_end_grace_comes_from_the_spec(tmp_path: Path) -> None:
    assert load_job_spec(spec_file(tmp_path)).end_grace_s == DEFAULT_END_GRACE_S == 30
    assert load_job_spec(spec_file(tmp_path, "end_grace: 2m\n")).end_grace_s == 120


@pytest.mark.parametrize("value", ["0s", "soon", "-3"])
def test_a_bad_end_grace_names_the_field(tmp_path: Path, value: str) -> None:
    path = spec_file(tmp_path, f"end_grace: {value}\n")
    with pytest.raises(InvalidInput) as err:
        load_job_spec(path)
    assert err.value.field == "end_grace" and err.value.line == 6, err.value


# -- what people see --------------------------------------------------------------------------

def test_job_show_and_watch_say_what_a_running_job_waits_for() -> None:
    from cairn.cli.jobview import ending_note, renderable

    events = history()
    assert ending_note(fold(events)) is None  # the server exited; the wait is not recorded yet
    _, job = decide_and_fold(events, 10.1)
    note = ending_note(job)
    assert note is not None
    assert "the server role finished at 12:00:10" in note
    assert f"up to {GRACE:g}s for site-a/client/0, site-b/client/1 to exit" in note
    assert renderable(job, 200)[0].caption == note
    events.append(exited("site-a", "client", 0, 0, 10.4))
    assert "for site-b/client/1 to exit" in (ending_note(fold(events)) or "")
    events.append(exited("site-b", "client", 1, 0, 10.5))
    _, done = decide_and_fold(events, 10.6)
    assert done.state == "completed" and ending_note(done) is None
