"""The backend's watch over the driver seam: sacct takes over once squeue forgets a job, a job
neither knows is reported lost only after a grace period, and an unreachable controller stops
nothing. The driver here is an in-memory cluster (the seam is a Protocol); everything the
real drivers do is in tests/integration/test_slurm_backend.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from cairn.launcher.backends import LaunchHandle
from cairn.launcher.backends.slurm import JobRequest, JobStatus, SlurmBackend, SlurmUnavailable
from cairn.launcher.backends.slurm import backend as backend_module


class MemoryCluster:
    """What a controller and its accounting remember, set by the test."""

    name = "memory"

    def __init__(self) -> None:
        self.listed: dict[str, JobStatus] = {}
        self.accounted: dict[str, JobStatus] = {}
        self.down = False
        self.cancels: list[tuple[str, str | None]] = []
        self.polls = 0  # how often the backend asked for the controller's jobs

    async def submit(self, request: JobRequest, script_path: str) -> str:
        raise AssertionError("not submitted in these tests")

    async def jobs(self) -> dict[str, JobStatus]:
        self.polls += 1
        if self.down:
            raise SlurmUnavailable("slurmctld does not answer")
        return dict(self.listed)

    async def accounting(self, job_id: str) -> JobStatus | None:
        if self.down:
            raise SlurmUnavailable("slurmdbd does not answer")
        return self.accounted.get(job_id)

    async def cancel(self, job_id: str, signal: str | None = None) -> None:
        self.cancels.append((job_id, signal))

    async def close(self) -> None:
        return None


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait (bounded) until `condition()` holds, looking after every turn of the loop."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.001)


def handle(tmp_path: Path, job_id: str = "41") -> LaunchHandle:
    return LaunchHandle(launch_id="j/s/client/0/0", backend="slurm", native_id=job_id,
                        workdir=str(tmp_path), log_path=str(tmp_path / "worker.log"),
                        started_at=datetime.now(UTC))


def status(state: str, code: int | None = 0, **kw: object) -> JobStatus:
    return JobStatus(job_id="41", state=state, exit_code=code,  # type: ignore[arg-type]
                     comment="cairn:j/s/client/0/0", **kw)


async def test_sacct_is_the_authority_once_squeue_forgot(tmp_path: Path) -> None:
    cluster = MemoryCluster()
    cluster.listed["41"] = status("RUNNING")
    backend = SlurmBackend(tmp_path, driver=cluster, poll_s=0.01)
    h = handle(tmp_path)
    assert await backend.reattach(h) == h
    del cluster.listed["41"]  # MinJobAge passed: the controller forgot it
    cluster.accounted["41"] = status("COMPLETED", 0, derived_code=2, from_accounting=True)
    ended = await asyncio.wait_for(backend.wait(h), 10)
    assert (ended.exit_code, ended.cause) == (2, "crashed")
    await backend.close()


async def test_an_unreachable_controller_stops_nothing(tmp_path: Path) -> None:
    cluster = MemoryCluster()
    cluster.listed["41"] = status("RUNNING")
    backend = SlurmBackend(tmp_path, driver=cluster, poll_s=0.01)
    h = handle(tmp_path)
    await backend.reattach(h)
    cluster.down = True
    waiting = asyncio.ensure_future(backend.wait(h))
    polls = cluster.polls
    await until(lambda: cluster.polls >= polls + 10)  # ten polls the controller refused
    assert not waiting.done()
    cluster.down = False
    cluster.listed["41"] = status("TIMEOUT", None, signal=15)
    ended = await asyncio.wait_for(waiting, 10)
    assert ended.cause == "timeout"
    await backend.close()


async def test_a_job_nobody_knows_is_lost_only_after_a_grace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_module, "UNKNOWN_GRACE_S", 0.3)
    cluster = MemoryCluster()
    cluster.listed["41"] = status("PENDING")
    backend = SlurmBackend(tmp_path, driver=cluster, poll_s=0.01)
    h = handle(tmp_path)
    await backend.reattach(h)
    del cluster.listed["41"]  # e.g. the controller lost its state, no accounting
    ended = await asyncio.wait_for(backend.wait(h), 10)
    assert ended.cause == "infrastructure" and "unknown" in ended.message
    await backend.close()


async def test_cancel_of_a_pending_job_removes_it_at_once(tmp_path: Path) -> None:
    cluster = MemoryCluster()
    cluster.listed["41"] = status("PENDING")
    backend = SlurmBackend(tmp_path, driver=cluster, poll_s=0.01)
    h = handle(tmp_path)
    await backend.reattach(h)
    polls = cluster.polls
    await until(lambda: cluster.polls > polls + 1)  # the watch has seen it pending
    task = asyncio.ensure_future(backend.cancel(h, grace_s=30))
    await until(lambda: bool(cluster.cancels))
    assert cluster.cancels == [("41", None)]  # no SIGTERM round, no grace wait
    cluster.listed["41"] = status("CANCELLED", None)
    await asyncio.wait_for(task, 10)
    assert (await backend.wait(h)).cause == "cancelled"
    await backend.close()


async def test_a_restart_while_the_controller_is_down_keeps_watching(tmp_path: Path) -> None:
    cluster = MemoryCluster()
    cluster.down = True
    backend = SlurmBackend(tmp_path, driver=cluster, poll_s=0.01)
    h = handle(tmp_path)
    assert await backend.reattach(h) == h  # not an error: the launcher starts anyway
    cluster.down = False
    cluster.listed["41"] = status("COMPLETED", 0)
    ended = await asyncio.wait_for(backend.wait(h), 10)
    assert (ended.exit_code, ended.cause) == (0, None)
    await backend.close()


async def test_a_job_id_that_names_another_job_is_not_adopted(tmp_path: Path) -> None:
    cluster = MemoryCluster()
    cluster.listed["41"] = JobStatus(job_id="41", state="RUNNING", comment="someone else's")
    backend = SlurmBackend(tmp_path, driver=cluster, poll_s=0.01)
    found = await backend.reattach(handle(tmp_path))
    assert not isinstance(found, LaunchHandle) and found.cause == "infrastructure"
    assert "not this worker's" in found.message
    # From accounting without comments (no job_comment flag), the id is trusted.
    cluster.listed.clear()
    cluster.accounted["42"] = JobStatus(job_id="42", state="COMPLETED", exit_code=0,
                                        from_accounting=True)
    other = await backend.reattach(msgspec.structs.replace(
        handle(tmp_path, "42"), launch_id="j/s/client/1/0"))
    assert not isinstance(other, LaunchHandle) and (other.exit_code, other.cause) == (0, None)
    await backend.close()


class LostAnswer(MemoryCluster):
    """A controller that queues the job but whose answer to the submit never arrives."""

    async def submit(self, request: JobRequest, script_path: str) -> str:
        self.listed["77"] = JobStatus(job_id="77", state="RUNNING", comment=request.comment)
        raise SlurmUnavailable("sbatch did not answer in 30 s")


async def test_a_submit_whose_answer_was_lost_is_found_by_its_tag(tmp_path: Path) -> None:
    from cairn.launcher.backends import LaunchSpec

    code = tmp_path / "code"
    code.mkdir()
    cluster = LostAnswer()
    backend = SlurmBackend(tmp_path / "site", driver=cluster, poll_s=0.01)
    spec = LaunchSpec(launch_id="j/s/client/0/0", job="j", study="x", site="s", role="client",
                      entrypoint="true", code_dir=str(code))
    h = await backend.launch(spec)
    assert h.native_id == "77"
    cluster.listed["77"] = JobStatus(job_id="77", state="COMPLETED", exit_code=0,
                                     comment="cairn:j/s/client/0/0")
    assert (await asyncio.wait_for(backend.wait(h), 10)).cause is None
    await backend.close()
