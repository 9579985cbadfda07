"""A restarted launcher finds its process workers again, or learns how they ended.

The first launcher is a separate Python process that launches and exits, so the worker is
truly orphaned (no longer our child), as after a real launcher restart.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from cairn.launcher.backends import LaunchHandle, LaunchSpec, WorkerExit, _proc, make_launch_id
from cairn.launcher.backends.process import ProcessBackend

FIRST_LAUNCHER = """
import asyncio, sys, msgspec
from cairn.launcher.backends import LaunchSpec
from cairn.launcher.backends.process import ProcessBackend

async def main() -> None:
    backend = ProcessBackend(sys.argv[1])
    handle = await backend.launch(msgspec.json.decode(sys.argv[2], type=LaunchSpec))
    await backend.close()
    sys.stdout.write(msgspec.json.encode(handle).decode())

asyncio.run(main())
"""

WAIT_FOR_GO = (
    "import os, time\nfor _ in range(2400):  # 120 s at most\n"
    "    if os.path.exists('go'): break\n    time.sleep(0.05)\nraise SystemExit(7)"
)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "code").mkdir()
    yield tmp_path / "site"
    # Whatever a failed test left running dies here, and only if it is still our worker.
    for record in (tmp_path / "handles").glob("*.json") if (tmp_path / "handles").exists() else []:
        handle = msgspec.json.decode(record.read_bytes(), type=LaunchHandle)
        if _proc.is_ours(int(handle.native_id), handle.start_ticks):
            _proc.signal_group(int(handle.native_id), signal.SIGKILL)


@pytest.fixture
async def restarted(site: Path) -> AsyncIterator[ProcessBackend]:
    backend = ProcessBackend(site, grace_s=0.5)
    try:
        yield backend
    finally:
        await backend.close()


async def launch_elsewhere(site: Path, source: str, timeout_s: float | None = None) -> LaunchHandle:
    """Launch from a launcher process that then exits, and return the handle it recorded."""
    spec = LaunchSpec(
        launch_id=make_launch_id("j1", "site-a", "client", 0, 0),
        job="j1",
        study="lung",
        site="site-a",
        role="client",
        entrypoint=["python", "-c", source],
        code_dir=str(site.parent / "code"),
        timeout_s=timeout_s,
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        FIRST_LAUNCHER,
        str(site),
        msgspec.json.encode(spec).decode(),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    handle = msgspec.json.decode(out, type=LaunchHandle)
    (site.parent / "handles").mkdir(exist_ok=True)
    (site.parent / "handles" / "worker.json").write_bytes(out)
    return handle


async def until_gone(handle: LaunchHandle, timeout_s: float = 10.0) -> None:
    exit_file = Path(handle.workdir) / ".cairn" / "exit.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = _proc.stat(int(handle.native_id))
        if exit_file.exists() and (state is None or state.state == "Z"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the worker did not end")


async def test_reattach_to_a_live_worker_then_wait(site: Path, restarted: ProcessBackend) -> None:
    handle = await launch_elsewhere(site, WAIT_FOR_GO)
    with pytest.raises(ChildProcessError):
        os.waitpid(int(handle.native_id), os.WNOHANG)  # noqa: ASYNC222 (WNOHANG: never blocks)
    assert await restarted.reattach(handle) == handle
    (Path(handle.workdir) / "go").touch()
    ended = await restarted.wait(handle)
    assert (ended.exit_code, ended.cause) == (7, "crashed")


@pytest.mark.parametrize(("code", "cause"), [(0, None), (5, "crashed")])
async def test_reattach_reports_an_exit_that_happened_while_down(
    site: Path, restarted: ProcessBackend, code: int, cause: str | None
) -> None:
    handle = await launch_elsewhere(site, f"print('bye'); raise SystemExit({code})")
    await until_gone(handle)
    found = await restarted.reattach(handle)
    assert isinstance(found, WorkerExit)
    assert (found.exit_code, found.cause) == (code, cause)
    assert await restarted.wait(handle) == found


async def test_cancel_after_restart(site: Path, restarted: ProcessBackend) -> None:
    handle = await launch_elsewhere(site, "import time; time.sleep(60)")
    await restarted.cancel(handle, grace_s=2.0)
    ended = await restarted.wait(handle)
    assert ended.cause == "cancelled"
    left = _proc.stat(int(handle.native_id))
    assert left is None or left.state == "Z" or left.start_ticks != handle.start_ticks


async def test_timeout_still_holds_after_restart(site: Path, restarted: ProcessBackend) -> None:
    handle = await launch_elsewhere(site, "import time; time.sleep(600)", timeout_s=1.0)
    assert await restarted.reattach(handle) == handle
    async with asyncio.timeout(60):  # a hang guard: the worker would sleep 600 s
        ended = await restarted.wait(handle)
    assert ended.cause == "timeout"


async def test_a_reused_pid_is_not_mistaken_for_the_worker(
    tmp_path: Path, restarted: ProcessBackend
) -> None:
    # A stranger now holds the pid our worker had: same number, a different start time.
    stranger = await asyncio.create_subprocess_exec("sleep", "30", start_new_session=True)
    try:
        ticks = _proc.start_ticks(stranger.pid)
        assert ticks is not None
        workdir = tmp_path / "gone"
        workdir.mkdir()
        handle = LaunchHandle(
            launch_id="j1/site-a/client/0/0",
            backend="process",
            native_id=str(stranger.pid),
            workdir=str(workdir),
            log_path=str(workdir / "worker.log"),
            started_at=datetime.now(UTC),
            start_ticks=ticks - 1,
        )
        found = await restarted.reattach(handle)
        assert isinstance(found, WorkerExit)
        assert (found.exit_code, found.cause) == (None, "infrastructure")
        await restarted.cancel(handle, grace_s=0.1)
        await asyncio.sleep(0.2)
        assert stranger.returncode is None  # never signalled
    finally:
        stranger.kill()
        await stranger.wait()
