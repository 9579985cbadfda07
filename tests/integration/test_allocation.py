"""Every worker proves its allocation before the job's code runs, on the process backend (SDK
workers and other programs, through the exit wrapper) and the Docker backend (the worker
image): a worker handed 2 GPUs where 1 was requested ends with `allocation-mismatch`; the
normal case passes and leaves its report."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cairn.launcher.backends import LaunchSpec, make_launch_id
from cairn.launcher.backends.base import Backend
from cairn.launcher.backends.process import ProcessBackend
from cairn.worker.allocation import MISMATCH_EXIT
from tests.fixtures.docker import BuiltImage, DockerEngine

CONTRACT = {"CAIRN_NATS_URL": "nats://127.0.0.1:1", "CAIRN_STUDY": "lung", "CAIRN_JOB": "j1",
            "CAIRN_SITE": "site-a", "CAIRN_ROLE": "client", "CAIRN_RANK": "0",
            "CAIRN_ATTEMPT": "0"}
# An SDK worker: `Worker.from_env()` proves the allocation before anything else runs. It then
# prints and exits without connecting (no bus here).
SDK_WORKER = """\
from cairn.worker import Worker
w = Worker.from_env()
print("job code ran as", w.role, flush=True)
"""


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "worker.py").write_text(SDK_WORKER)
    return code


@pytest.fixture(params=[False, True], ids=["cold", "warm"])
async def process(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    backend = ProcessBackend(tmp_path / "site", grace_s=1.0, poll_s=0.05,
                             warm=bool(request.param))
    try:
        yield backend
    finally:
        await backend.close()


def spec(code: Path, entrypoint: str | list[str], rank: int = 0, **kw: Any) -> LaunchSpec:
    fields: dict[str, Any] = {
        "launch_id": make_launch_id("j1", "site-a", "client", rank, 0), "job": "j1",
        "study": "lung", "site": "site-a", "role": "client", "rank": rank,
        "entrypoint": entrypoint, "code_dir": str(code), "env": CONTRACT}
    fields.update(kw)
    return LaunchSpec(**fields)


async def run(backend: Backend, s: LaunchSpec) -> tuple[Any, str, dict[str, Any] | None]:
    handle = await backend.launch(s)
    ended = await backend.wait(handle)
    report_path = Path(handle.workdir) / ".cairn" / "allocation.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return ended, Path(handle.log_path).read_text(), report


async def test_two_gpus_where_one_was_asked_for_ends_the_sdk_worker(
        process: Backend, code_dir: Path) -> None:
    ended, log, report = await run(process, spec(code_dir, "python worker.py",
                                                 gpus=["0", "1"], gpus_requested=1))
    assert (ended.exit_code, ended.cause) == (MISMATCH_EXIT, "allocation-mismatch"), log
    assert "can use 2 GPU(s) (0,1), asked for 1" in ended.message
    assert "job code ran" not in log  # it ended before the job's code
    assert report is not None and report["ok"] is False
    assert report["allocated"]["gpus"] == 1 and report["seen"]["cuda_visible_devices"] == [
        "0", "1"]


async def test_the_exit_wrapper_checks_programs_that_are_not_python(
        process: Backend, code_dir: Path) -> None:
    ended, log, report = await run(process, spec(
        code_dir, ["sh", "-c", "echo job code ran"], gpus=["0", "1"], gpus_requested=1))
    assert (ended.exit_code, ended.cause) == (MISMATCH_EXIT, "allocation-mismatch"), log
    assert "job code ran" not in log and "allocation mismatch" in log
    assert report is not None and report["problems"] == ["can use 2 GPU(s) (0,1), asked for 1"]
    # Fewer than asked fails the same way.
    short, _, _ = await run(process, spec(code_dir, ["sh", "-c", "echo ran"], rank=1,
                                          gpus=["0"], gpus_requested=2))
    assert short.cause == "allocation-mismatch"


async def test_the_normal_case_passes_on_the_process_backend(
        process: Backend, code_dir: Path) -> None:
    for rank, entrypoint in enumerate(("python worker.py", ["sh", "-c", "echo job code ran"])):
        ended, log, report = await run(process, spec(code_dir, entrypoint, rank=rank,
                                                     gpus=["3"], gpus_requested=1,
                                                     memory_bytes=512 * 1024 * 1024))
        assert (ended.exit_code, ended.cause) == (0, None), log
        assert "job code ran" in log
        assert report is not None and report["ok"] is True, report
        assert report["seen"]["cuda_visible_devices"] == ["3"]
    # A worker with no GPUs asked and none given: nothing to prove but still checked.
    ended, log, report = await run(process, spec(code_dir, "python worker.py", rank=5))
    assert ended.cause is None and report is not None and report["ok"], log


async def test_a_user_program_that_exits_78_is_just_a_crash(
        process: Backend, code_dir: Path) -> None:
    ended, _, report = await run(process, spec(code_dir, ["sh", "-c", "exit 78"]))
    assert report is not None and report["ok"] is True
    assert (ended.exit_code, ended.cause) == (78, "crashed")


async def test_the_normal_case_passes_in_a_container_of_the_worker_image(
        dockerd: DockerEngine, worker_image: BuiltImage, code_dir: Path,
        tmp_path: Path) -> None:
    from cairn.launcher.backends.docker import DockerBackend

    backend = DockerBackend(tmp_path / "docker-site", docker_host=dockerd.host, poll_s=0.1,
                            secrets_root=tmp_path / "shm")
    try:
        ended, log, report = await run(backend, spec(
            code_dir, "python worker.py", image=worker_image.tag, cpus=[0], millicpus=1000,
            memory_bytes=256 * 1024 * 1024, platform={"docker": {"network": "none"}}))
    finally:
        await backend.close()
    assert (ended.exit_code, ended.cause) == (0, None), log
    assert "job code ran as client" in log
    assert report is not None and report["ok"] is True, report
    # What the container could see is what the engine was told to give it.
    assert report["seen"]["cpus"] == [0]
    assert report["seen"]["memory_bytes"] == 256 * 1024 * 1024
    assert report["seen"]["cuda_visible_devices"] == []
    assert report["notes"] == []
