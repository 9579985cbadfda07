"""The slurm backend on a real two-node cluster (tests/fixtures/slurm_lab.py), through both
drivers: the CLI (sbatch, squeue --json, sacct, scancel) and slurmrestd with a JWT."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cairn.errors import InvalidInput
from cairn.launcher.backends import LaunchFailed, LaunchSpec, WorkerExit, make_launch_id
from cairn.launcher.backends.slurm import SlurmBackend
from tests.fixtures.slurm_lab import SlurmLab

CONTRACT = {"CAIRN_NATS_URL": "nats://127.0.0.1:4222", "CAIRN_STUDY": "lung",
            "CAIRN_JOB": "j1", "CAIRN_SITE": "site-a", "CAIRN_ROLE": "client",
            "CAIRN_RANK": "0", "CAIRN_ATTEMPT": "0"}
WAIT_S = 120.0


def make_backend(lab: SlurmLab, root: Path, driver: str) -> SlurmBackend:
    if driver == "cli":
        return SlurmBackend(root, driver="cli", env=lab.env, poll_s=0.2, timeout_s=20)
    return SlurmBackend(root, driver="rest", url=f"unix:{lab.rest_socket}", user="root",
                        jwt_key=str(lab.jwt_key), poll_s=0.2, timeout_s=20)


@pytest.fixture(params=["cli", "rest"])
def driver(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def backend(slurm_lab: SlurmLab, tmp_path: Path, driver: str
                  ) -> AsyncIterator[SlurmBackend]:
    b = make_backend(slurm_lab, tmp_path / "site", driver)
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "hello.txt").write_text("from the bundle")
    return code


def spec(code: Path, entrypoint: str | list[str], rank: int = 0, job: str = "j1",
         **kw: Any) -> LaunchSpec:
    fields: dict[str, Any] = {
        "launch_id": make_launch_id(job, "site-a", "client", rank, 0), "job": job,
        "study": "lung", "site": "site-a", "role": "client", "rank": rank,
        "entrypoint": entrypoint, "code_dir": str(code), "env": CONTRACT,
        "memory_bytes": 200 * 2**20, "millicpus": 1000}
    fields.update(kw)
    return LaunchSpec(**fields)


async def run(backend: SlurmBackend, s: LaunchSpec) -> tuple[WorkerExit, str]:
    handle = await backend.launch(s)
    ended = await asyncio.wait_for(backend.wait(handle), WAIT_S)
    return ended, Path(handle.log_path).read_text()


async def until(predicate: Any, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.2)


def env_of(log: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


async def test_the_job_gets_the_contract_its_code_and_exit_codes(
        backend: SlurmBackend, code_dir: Path, tmp_path: Path) -> None:
    script = "env; cat hello.txt; echo; cat $DB_PW_FILE; echo; echo out > result.txt"
    ok, log = await run(backend, spec(code_dir, ["bash", "-c", script], rank=0,
                                      study_env={"TZ": "UTC"}, secret_env={"DB_PW": "s3cret"}))
    bad, _ = await run(backend, spec(code_dir, ["bash", "-c", "echo boom; exit 3"], rank=1))
    assert (ok.exit_code, ok.cause) == (0, None), log
    env = env_of(log)
    workdir = tmp_path / "site" / "workers" / "j1_site-a_client_0_0"
    assert env["CAIRN_WORKDIR"] == str(workdir) and env["CAIRN_JOB"] == "j1"
    assert env["CAIRN_DATA"] == str(workdir / ".cairn" / "data")
    assert env["TZ"] == "UTC" and "DB_PW" not in env
    assert env["CAIRN_ALLOCATION"].startswith("gpus=0;gpu_ids=;")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["RANK"] == "0"
    assert env["SLURM_JOB_NAME"] == "cairn-j1-client-0"
    assert "from the bundle" in log and "s3cret" in log
    assert (workdir / "result.txt").read_text() == "out\n"
    # The secret reached the job as a 0400 file named by DB_PW_FILE, never in its environment
    # or the script, and the file is gone once the job ended.
    assert env["DB_PW_FILE"] == str(workdir / ".cairn" / "secrets" / "DB_PW")
    assert "s3cret" not in (workdir / ".cairn" / "job.sh").read_text()
    assert not (workdir / ".cairn" / "secrets").exists()
    assert (bad.exit_code, bad.cause) == (3, "crashed")


async def test_a_failed_step_under_a_clean_exit_is_a_crash(backend: SlurmBackend,
                                                          code_dir: Path) -> None:
    # ExitCode 0:0, DerivedExitCode 1:0: reading ExitCode alone calls this a success.
    ended, log = await run(backend, spec(code_dir, ["bash", "-c", "srun false; exit 0"]))
    assert (ended.exit_code, ended.cause) == (1, "crashed"), (ended, log)
    assert "DerivedExitCode" in ended.message


async def test_each_gpu_job_gets_its_own_gpus_and_a_third_pends(
        backend: SlurmBackend, code_dir: Path) -> None:
    one = {"slurm": {"partition": "one"}}
    script = "echo CVD=$CUDA_VISIBLE_DEVICES; sleep 4"
    handles = [await backend.launch(spec(code_dir, ["bash", "-c", script], rank=r,
                                         gpus=["x"], platform=one)) for r in range(3)]

    async def third_pends() -> bool:
        status = await backend.status(handles[2])
        return status is not None and status.state == "PENDING"

    await until(third_pends)
    status = await backend.status(handles[2])
    # Priority: queued behind the others, which wait for the same GPUs.
    assert status is not None and status.reason in ("Resources", "Priority"), status
    ended = [await asyncio.wait_for(backend.wait(h), WAIT_S) for h in handles]
    assert [(e.exit_code, e.cause) for e in ended] == [(0, None)] * 3
    seen = [env_of(Path(h.log_path).read_text())["CVD"] for h in handles]
    assert sorted(seen[:2]) == ["0", "1"], seen
    assert seen[2] in ("0", "1")


async def test_memory_over_the_limit_is_oom(backend: SlurmBackend, code_dir: Path) -> None:
    hog = [sys.executable, "-c", "a = bytearray(400 * 2**20); print('survived')"]
    ended, log = await run(backend, spec(code_dir, hog, memory_bytes=64 * 2**20))
    assert ended.cause == "oom", (ended, log)
    assert ended.exit_code == 137 and "survived" not in log


async def test_cancel_sends_sigterm_then_the_job_ends_cancelled(
        backend: SlurmBackend, code_dir: Path) -> None:
    script = "trap 'echo got TERM; exit 143' TERM; echo ready; while true; do sleep 0.2; done"
    handle = await backend.launch(spec(code_dir, ["bash", "-c", script]))
    await until(lambda: _async("ready" in _read(handle.log_path)))
    await asyncio.wait_for(backend.cancel(handle, grace_s=5), WAIT_S)
    ended = await backend.wait(handle)
    assert ended.cause == "cancelled", ended
    assert "got TERM" in _read(handle.log_path)


async def test_a_two_node_job_has_a_rank_and_its_gpus_on_each_node(
        backend: SlurmBackend, code_dir: Path, slurm_lab: SlurmLab) -> None:
    script = ("echo rank=$RANK node=$SLURMD_NODENAME cvd=$CUDA_VISIBLE_DEVICES "
              "world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT cairn_rank=$CAIRN_RANK")
    ended, log = await run(backend, spec(code_dir, ["bash", "-c", script], nodes=2,
                                         gpus=["a", "b"]))
    assert (ended.exit_code, ended.cause) == (0, None), log
    lines = sorted(line for line in log.splitlines() if line.startswith("rank="))
    assert len(lines) == 2, log
    masters = set()
    for index, (line, node) in enumerate(zip(lines, slurm_lab.nodes, strict=True)):
        fields = dict(part.split("=", 1) for part in line.split())
        assert fields["rank"] == str(index) and fields["node"] == node
        assert fields["cvd"] == "0,1" and fields["world"] == "2"
        assert fields["cairn_rank"] == "0"
        masters.add(fields["master"])
    assert len(masters) == 1 and masters.pop().rsplit(":", 1)[1].isdigit()


async def test_reattach_after_a_restart_also_for_a_job_that_ended_meanwhile(
        slurm_lab: SlurmLab, tmp_path: Path, code_dir: Path, driver: str) -> None:
    root = tmp_path / "site"
    # The long job runs until the test lets it end (bounded at ten minutes, and let end when
    # the test does), however slow the machine: a fixed sleep, or a bound near the time
    # Slurm takes to end the short job on a busy machine, could end it before the reattach
    # looks at it.
    go = tmp_path / "go"
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    step = ["the submits"]
    first = make_backend(slurm_lab, root, driver)
    second = make_backend(slurm_lab, root, driver)
    long = short = None
    try:
        # Every step inside one bound well under pytest's own, so a failure names the step
        # it was in, when, and what Slurm said, instead of pytest's bare timeout.
        async with asyncio.timeout(70):
            long = await first.launch(spec(code_dir, ["bash", "-c", (
                f"for i in $(seq 6000); do [ -e {go} ] && exit 5; sleep 0.1; done; exit 9")],
                rank=0))
            short = await first.launch(spec(code_dir, ["bash", "-c", "exit 7"], rank=1))
            step[0] = "the first launcher's close"
            await first.close()  # the launcher goes down; its jobs do not

            step[0] = "the short job's end"

            async def short_ended() -> bool:
                assert short is not None
                status = await second.status(short)
                return status is not None and not status.active

            await until(short_ended, timeout=70)
            step[0] = "the reattach"
            found_long = await second.reattach(long)
            found_short = await second.reattach(short)
            assert found_long == long
            assert isinstance(found_short, WorkerExit)
            assert (found_short.exit_code, found_short.cause) == (7, "crashed")
            go.touch()
            step[0] = "the long job's end, seen by the reattached watch"
            ended = await second.wait(long)
            assert (ended.exit_code, ended.cause) == (5, "crashed")
            # A job id that is now another launch's job is not adopted.
            step[0] = "the foreign job's reattach"
            foreign = await second.reattach(msgspec_replace(short, launch_id="j9/site-a/c/0/0"))
            assert isinstance(foreign, WorkerExit) and foreign.cause == "infrastructure"
            assert "not this worker's" in foreign.message
    except TimeoutError:
        raise AssertionError(
            f"{driver}: still in {step[0]} {loop.time() - t0:.0f} s after the start; Slurm "
            f"says short={await _quietly(second.status(short)) if short else None} "
            f"long={await _quietly(second.status(long)) if long else None}"
            f"\n{slurm_lab.log_tail()}") from None
    finally:
        go.touch()
        await first.close()
        await second.close()


async def _quietly(asking: Any) -> Any:
    try:
        return await asyncio.wait_for(asking, 8)
    except Exception as exc:  # a diagnostic: whatever went wrong is worth printing
        return f"({type(exc).__name__}: {exc})"


async def test_accounting_is_the_authority_once_asked(slurm_lab: SlurmLab, backend: SlurmBackend,
                                                      code_dir: Path) -> None:
    if not slurm_lab.accounting:
        pytest.skip("no slurmdbd here: apt-get install slurmdbd mariadb-server")
    handle = await backend.launch(spec(code_dir, ["bash", "-c", "srun false; exit 0"]))
    ended = await asyncio.wait_for(backend.wait(handle), WAIT_S)

    async def recorded() -> bool:
        # slurmdbd learns of a job's end, and then of its steps' exits, a moment after the
        # controller (the backend asks it only once the controller forgot the job, minutes on).
        status = await backend.driver.accounting(handle.native_id)
        return status is not None and not status.active and status.derived_code is not None \
            and status.derived_code > 0

    await until(recorded)
    status = await backend.driver.accounting(handle.native_id)
    assert status is not None and status.from_accounting
    assert status.state == "COMPLETED" and status.comment == "cairn:" + handle.launch_id
    assert (status.exit_code, status.derived_code) == (0, 1)
    assert ended.cause == "crashed"


async def test_bad_settings_and_refused_jobs(backend: SlurmBackend, code_dir: Path) -> None:
    with pytest.raises(InvalidInput, match="slurm settings"):
        await backend.launch(spec(code_dir, "true", platform={"slurm": {"gres": "gpu:1"}}))
    with pytest.raises(LaunchFailed, match="refused"):
        await backend.launch(spec(code_dir, "true", rank=1,
                                  platform={"slurm": {"partition": "nosuch"}}))
    # Nothing is left behind: the same launch ids can be tried again.
    ended, _ = await run(backend, spec(code_dir, "true", rank=1))
    assert ended.cause is None


def msgspec_replace(handle: Any, **changes: Any) -> Any:
    import msgspec

    return msgspec.structs.replace(handle, **changes)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return ""


async def _async(value: bool) -> bool:
    return value


async def test_a_one_minute_time_limit_ends_with_cause_timeout_on_both_drivers(
        slurm_lab: SlurmLab, tmp_path: Path, code_dir: Path) -> None:
    # Slurm's limits are whole minutes: both drivers' cases run at once, so this costs one.
    backends = [make_backend(slurm_lab, tmp_path / d, d) for d in ("cli", "rest")]
    try:
        handles = [await b.launch(spec(code_dir, ["sleep", "600"], rank=i,
                                       platform={"slurm": {"time": "0:01"}}))
                   for i, b in enumerate(backends)]
        ended = await asyncio.gather(*(asyncio.wait_for(b.wait(h), 240.0)
                                       for b, h in zip(backends, handles, strict=True)))
    finally:
        for b in backends:
            await b.close()
    assert [e.cause for e in ended] == ["timeout", "timeout"], ended
    assert all("time limit" in e.message for e in ended)
