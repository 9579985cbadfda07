"""The process backend with real worker processes: environment, placement, exits, limits.

Every test with the `backend` fixture runs four times: workers exec'd cold and forked from the
warm interpreter (`warm`), which must change nothing a worker can observe; each in the site's
default isolation (a bubblewrap sandbox and a uid of their own, where this machine allows)
and with none (`plain`, on trusted code), which must change nothing the tests look at either.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cairn.errors import Conflict
from cairn.launcher.backends import (
    DatasetMount,
    LaunchFailed,
    LaunchHandle,
    LaunchSpec,
    make_launch_id,
)
from cairn.launcher.backends._memlimit import memory_limit_mechanism
from cairn.launcher.backends.process import ProcessBackend

CONTRACT = {
    "CAIRN_NATS_URL": "nats://127.0.0.1:4222",
    "CAIRN_STUDY": "lung",
    "CAIRN_JOB": "j1",
    "CAIRN_SITE": "site-a",
    "CAIRN_ROLE": "client",
    "CAIRN_RANK": "0",
    "CAIRN_ATTEMPT": "0",
    "CAIRN_WORKDIR": "/caller/guess",
    "CAIRN_DATA": "/caller/guess",
    "TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
}

REPORT = """\
import json, os, sys
print(json.dumps({
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "files": sorted(os.listdir(".")),
    "cpus": sorted(os.sched_getaffinity(0)),
    "python": sys.executable,
    "secret": [open(f).read(), oct(os.stat(f).st_mode & 0o777)]
              if (f := os.environ.get("DB_PASSWORD_FILE")) else None,
}))
"""


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    (code / "app").mkdir(parents=True)
    (code / "app" / "__main__.py").write_text(REPORT)
    (code / "app" / "__init__.py").write_text("")
    return code


@pytest.fixture(params=[False, True], ids=["cold", "warm"])
def warm(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture(params=["isolated", "plain"])
def isolation(request: pytest.FixtureRequest) -> dict[str, str]:
    return {} if request.param == "isolated" else {"sandbox": "none", "worker_uids": "none"}


@pytest.fixture
async def backend(tmp_path: Path, warm: bool,
                  isolation: dict[str, str]) -> AsyncIterator[ProcessBackend]:
    b = ProcessBackend(tmp_path / "site", grace_s=1.0, warm=warm, **isolation)
    try:
        yield b
    finally:
        await b.close()


def make_spec(
    code_dir: Path, entrypoint: str | list[str], rank: int = 0, **kw: object
) -> LaunchSpec:
    launch_id = make_launch_id("j1", "site-a", "client", rank, 0)
    fields: dict[str, object] = {
        "launch_id": launch_id,
        "job": "j1",
        "study": "lung",
        "site": "site-a",
        "role": "client",
        "rank": rank,
        "entrypoint": entrypoint,
        "code_dir": str(code_dir),
        "env": CONTRACT,
        "trusted_code": True,  # so that an unisolated backend runs it too
    }
    fields.update(kw)
    return LaunchSpec(**fields)  # type: ignore[arg-type]


def log_text(handle: LaunchHandle) -> str:
    """The worker's log; a small local file, read directly."""
    return Path(handle.log_path).read_text(errors="replace")


def py(source: str) -> list[str]:
    return ["python", "-c", source]


async def run_report(backend: ProcessBackend, spec: LaunchSpec) -> tuple[LaunchHandle, dict]:  # type: ignore[type-arg]
    handle = await backend.launch(spec)
    ended = await backend.wait(handle)
    assert (ended.exit_code, ended.cause) == (0, None), log_text(handle)
    return handle, json.loads(log_text(handle))


async def wait_for_log(handle: LaunchHandle, text: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log_text(handle):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {handle.log_path}")


async def test_worker_gets_contract_env_code_and_no_launcher_env(
    backend: ProcessBackend, code_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_ONLY_SECRET", "leak")
    spec = make_spec(
        code_dir,
        "python -m app",
        study_env={"TZ": "UTC", "CAIRN_JOB": "shadowed"},
        secret_env={"DB_PASSWORD": "s3cret"},
    )
    handle, seen = await run_report(backend, spec)
    env = seen["env"]
    for key in CONTRACT.keys() - {"CAIRN_WORKDIR", "CAIRN_DATA"}:
        assert env[key] == CONTRACT[key]
    assert env["CAIRN_WORKDIR"] == handle.workdir == seen["cwd"]
    assert env["CAIRN_DATA"] == str(Path(handle.workdir) / ".cairn" / "data")
    assert (env["TZ"], env["PYTHONUNBUFFERED"]) == ("UTC", "1")
    # The secret is a 0400 file in the worker's private folder, never an environment value;
    # it is gone once the worker has ended.
    secret = Path(handle.workdir) / ".cairn" / "secrets" / "DB_PASSWORD"
    assert "DB_PASSWORD" not in env and env["DB_PASSWORD_FILE"] == str(secret)
    assert "s3cret" not in json.dumps(env) and not secret.exists()
    assert seen["secret"] == ["s3cret", "0o400"]
    assert "LAUNCHER_ONLY_SECRET" not in env
    assert "app" in seen["files"] and "worker.log" in seen["files"]
    assert handle.workdir.endswith("workers/j1_site-a_client_0_0")
    # `python` in an entrypoint is the interpreter running the launcher.
    assert seen["python"] == sys.executable


async def test_gpus_are_exposed_exactly(backend: ProcessBackend, code_dir: Path) -> None:
    _, none = await run_report(backend, make_spec(code_dir, "python -m app", rank=0))
    _, two = await run_report(
        backend, make_spec(code_dir, "python -m app", rank=1, gpus=["0", "3"])
    )
    assert none["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert two["env"]["CUDA_VISIBLE_DEVICES"] == "0,3"


async def test_datasets_appear_under_cairn_data(
    backend: ProcessBackend, code_dir: Path, tmp_path: Path
) -> None:
    source = tmp_path / "ct"
    source.mkdir()
    (source / "scan.txt").write_text("lungs")
    reader = "import os; print(open(os.environ['CAIRN_DATA'] + '/ct-scans/scan.txt').read())"
    spec = make_spec(code_dir, py(reader), datasets={"ct-scans": DatasetMount(source=str(source))})
    handle = await backend.launch(spec)
    ended = await backend.wait(handle)
    assert ended.cause is None
    assert log_text(handle).strip() == "lungs"


async def test_cpu_affinity_is_applied(backend: ProcessBackend, code_dir: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    _, pinned = await run_report(backend, make_spec(code_dir, "python -m app", cpus=[allowed[-1]]))
    assert pinned["cpus"] == [allowed[-1]]
    _, picked = await run_report(
        backend, make_spec(code_dir, "python -m app", rank=1, millicpus=500)
    )
    assert len(picked["cpus"]) == 1 and set(picked["cpus"]) <= set(allowed)
    _, free = await run_report(backend, make_spec(code_dir, "python -m app", rank=2, millicpus=0))
    assert free["cpus"] == allowed


async def test_stdout_and_stderr_are_captured(backend: ProcessBackend, code_dir: Path) -> None:
    source = "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"
    handle = await backend.launch(make_spec(code_dir, py(source)))
    await backend.wait(handle)
    text = b"".join([chunk async for chunk in backend.logs(handle)]).decode()
    assert "to stdout" in text and "to stderr" in text
    assert Path(handle.log_path).name == "worker.log"


async def test_logs_follow_until_the_worker_ends(backend: ProcessBackend, code_dir: Path) -> None:
    source = "import time\nfor i in range(5):\n    print('line', i); time.sleep(0.1)"
    handle = await backend.launch(make_spec(code_dir, py(source)))
    text = b"".join([chunk async for chunk in backend.logs(handle, follow=True)]).decode()
    assert [f"line {i}" for i in range(5)] == text.splitlines()


async def test_clean_exit_and_crash(backend: ProcessBackend, code_dir: Path) -> None:
    ok = await backend.launch(make_spec(code_dir, py("pass"), rank=0))
    bad = await backend.launch(make_spec(code_dir, py("raise SystemExit(3)"), rank=1))
    assert (await backend.wait(ok)).cause is None
    crashed = await backend.wait(bad)
    assert (crashed.exit_code, crashed.cause) == (3, "crashed")
    assert "code 3" in crashed.message


async def test_cancel_stops_the_worker_with_sigterm_before_the_grace_ends(
    backend: ProcessBackend, code_dir: Path
) -> None:
    # The worker records the SIGTERM it receives and exits on it. A cancel that waited out
    # the (long) grace and killed it would end it with SIGKILL, never with this record.
    graceful = (
        "import os, signal, sys, time\n"
        "def stop(signum, frame):\n"
        "    print('got', signal.Signals(signum).name, flush=True)\n"
        "    os._exit(128 + signum)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\ntime.sleep(600)"
    )
    handle = await backend.launch(make_spec(code_dir, py(graceful)))
    await wait_for_log(handle, "ready")
    async with asyncio.timeout(60):  # a hang guard, not a measurement
        await backend.cancel(handle, grace_s=300.0)
        ended = await backend.wait(handle)
    assert (ended.cause, ended.exit_code) == ("cancelled", 128 + 15)
    assert "got SIGTERM" in log_text(handle)


async def test_cancel_kills_a_worker_that_ignores_sigterm(
    backend: ProcessBackend, code_dir: Path
) -> None:
    stubborn = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\ntime.sleep(60)"
    )
    handle = await backend.launch(make_spec(code_dir, py(stubborn)))
    await wait_for_log(handle, "ready")
    async with asyncio.timeout(60):  # a hang guard, not a measurement
        await backend.cancel(handle, grace_s=1.0)
        ended = await backend.wait(handle)
    # It outlived the SIGTERM it ignored, so only the kill after the grace ended it.
    assert (ended.cause, ended.exit_code) == ("cancelled", 128 + 9)


async def test_timeout_stops_the_worker(tmp_path: Path, code_dir: Path, warm: bool) -> None:
    backend = ProcessBackend(tmp_path / "site", grace_s=0.5, warm=warm)
    try:
        spec = make_spec(code_dir, py("import time; time.sleep(600)"), timeout_s=0.5)
        async with asyncio.timeout(60):  # a hang guard: the worker would sleep 600 s
            ended = await backend.wait(await backend.launch(spec))
    finally:
        await backend.close()
    assert ended.cause == "timeout"


@pytest.mark.parametrize("mechanism", ["auto", "rlimit-as"])
async def test_memory_over_the_limit_is_oom(
    tmp_path: Path, code_dir: Path, mechanism: str, warm: bool
) -> None:
    if mechanism == "auto" and memory_limit_mechanism() == "none":
        pytest.skip("no memory limit mechanism works here (no writable cgroup, no RLIMIT_AS)")
    backend = ProcessBackend(tmp_path / "site", memory_limit=mechanism, warm=warm)
    hog = "data = b'x' * (1024 * 1024 * 1024); print('survived', len(data))"
    try:
        spec = make_spec(code_dir, py(hog), memory_bytes=256 * 1024 * 1024)
        handle = await backend.launch(spec)
        ended = await backend.wait(handle)
    finally:
        await backend.close()
    assert handle.memory_limit == (memory_limit_mechanism() if mechanism == "auto" else mechanism)
    assert ended.cause == "oom", (ended, log_text(handle))
    assert handle.memory_limit in ended.message
    if handle.cgroup is not None:
        assert not await asyncio.to_thread(os.path.exists, handle.cgroup)  # removed at the end


async def test_missing_program_fails_the_launch_and_leaves_nothing(
    backend: ProcessBackend, code_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(LaunchFailed, match="no-such-program"):
        await backend.launch(make_spec(code_dir, "no-such-program --flag"))
    assert list((tmp_path / "site" / "workers").iterdir()) == []


async def test_unstartable_program_is_launch_failed(
    backend: ProcessBackend, code_dir: Path
) -> None:
    # Found on PATH but not executable: only the exec itself can tell.
    script = code_dir / "run.sh"
    script.write_text("#!/no/such/interpreter\n")
    script.chmod(0o755)
    ended = await backend.wait(await backend.launch(make_spec(code_dir, "./run.sh")))
    assert (ended.exit_code, ended.cause) == (None, "launch-failed")
    assert "run.sh" in ended.message


async def test_same_launch_id_twice_is_a_conflict(backend: ProcessBackend, code_dir: Path) -> None:
    spec = make_spec(code_dir, py("pass"))
    await backend.wait(await backend.launch(spec))
    with pytest.raises(Conflict):
        await backend.launch(spec)


async def test_two_sites_on_one_host_never_share_a_workers_cgroup(
        tmp_path: Path, code_dir: Path) -> None:
    # Cgroups are the host's: two launchers (two sites, two federations) starting the same
    # launch id at once each get their own, and one ending removes nothing of the other's.
    sites = [ProcessBackend(tmp_path / f"site-{i}", grace_s=1.0) for i in (1, 2)]
    slow = "import time; time.sleep(1.5); print('done')"
    try:
        spec = make_spec(code_dir, py(slow), memory_bytes=256 * 1024 * 1024)
        handles = [await b.launch(spec) for b in sites]
        quick = make_spec(code_dir, py("pass"), rank=1, memory_bytes=256 * 1024 * 1024)
        await sites[0].wait(await sites[0].launch(quick))
        ended = [await b.wait(h) for b, h in zip(sites, handles, strict=True)]
    finally:
        for b in sites:
            await b.close()
    assert [(e.exit_code, e.cause) for e in ended] == [(0, None), (0, None)], \
        [log_text(h) for h in handles]
    if sites[0].memory_mechanism in ("cgroup-v1", "cgroup-v2"):
        assert handles[0].cgroup != handles[1].cgroup, handles
