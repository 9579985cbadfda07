"""Warm workers: Python workers forked from the zygote see what a fresh interpreter would,
and every launch a fresh interpreter would run differently is exec'd cold instead.

These tests tell a warm worker from a cold one by the process tree, which the sandbox hides
(a pid namespace of its own): their backends run unsandboxed (`PLAIN`), on trusted code.
tests/integration/test_sandbox.py holds warm against cold inside the sandbox.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cairn.launcher.backends import _warm
from cairn.launcher.backends._proc import stat
from cairn.launcher.backends.process import ProcessBackend
from tests.integration.test_process_backend import log_text, make_spec

PROBE = """\
import json, os, signal, stat, sys
from cairn import telemetry

def parent_of(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])

def disposition(signum):
    handler = signal.getsignal(signum)
    return getattr(handler, "__name__", str(handler))

stdin = os.fstat(0)
print(json.dumps({
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "argv": sys.argv,
    "path": sys.path,
    "name": __name__,
    "file": globals().get("__file__"),
    "cpus": sorted(os.sched_getaffinity(0)),
    "stdin_is_null": stat.S_ISCHR(stdin.st_mode) and stdin.st_rdev == os.stat(os.devnull).st_rdev,
    "signals": {s.name: disposition(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                                                 signal.SIGPIPE, signal.SIGCHLD)},
    "flags": list(sys.flags),
    "stdout": [sys.stdout.line_buffering, sys.stdout.write_through, sys.stdout.encoding],
    "traceparent": telemetry.current_traceparent(),
    "session_leader_is_parent": os.getsid(0) == os.getppid(),
    "grandparent": parent_of(os.getppid()),
}), flush=True)
"""


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    (code / "probe").mkdir(parents=True)
    (code / "probe" / "__init__.py").write_text("")
    (code / "probe" / "__main__.py").write_text(PROBE)
    (code / "probe_script.py").write_text(PROBE)
    return code


PLAIN: dict[str, Any] = {"sandbox": "none", "worker_uids": "none"}


@pytest.fixture
async def warm_backend(tmp_path: Path) -> AsyncIterator[ProcessBackend]:
    b = ProcessBackend(tmp_path / "warm-site", warm=True, **PLAIN)
    try:
        yield b
    finally:
        await b.close()


async def run_probe(backend: ProcessBackend, code: Path, entrypoint: str | list[str],
                    rank: int = 0, **kw: Any) -> dict[str, Any]:
    handle = await backend.launch(make_spec(code, entrypoint, rank=rank, cpus=[0],
                                            trusted_code=True, **kw))
    ended = await backend.wait(handle)
    assert (ended.exit_code, ended.cause) == (0, None), log_text(handle)
    seen: dict[str, Any] = json.loads(log_text(handle).splitlines()[-1])
    return seen


def zygote_pid(backend: ProcessBackend) -> int:
    assert backend._zygote is not None and backend._zygote.pid is not None
    return backend._zygote.pid


def comparable(seen: dict[str, Any], workdir_key: str) -> dict[str, Any]:
    """What must match between a cold and a warm run (their directories differ by name)."""
    text = json.dumps({k: v for k, v in seen.items() if k != "grandparent"})
    return dict(json.loads(text.replace(workdir_key, "<workdir>")))


@pytest.mark.parametrize("entry", ["python -m probe a b", "python probe_script.py a b",
                                   ["python", "-c", PROBE, "a", "b"]],
                         ids=["module", "script", "command"])
async def test_a_warm_worker_sees_what_a_cold_one_sees(
    tmp_path: Path, bundle: Path, warm_backend: ProcessBackend, entry: str | list[str]
) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    env = {"PYTHONPATH": str(extra), "TZ": "UTC"}
    cold_backend = ProcessBackend(tmp_path / "cold-site", warm=False, **PLAIN)
    try:
        cold = await run_probe(cold_backend, bundle, entry, study_env=env)
    finally:
        await cold_backend.close()
    warm = await run_probe(warm_backend, bundle, entry, study_env=env)

    assert cold["grandparent"] == os.getpid()  # exec'd by this launcher
    assert warm["grandparent"] == zygote_pid(warm_backend)  # forked from the zygote
    assert comparable(warm, str(tmp_path / "warm-site")) == comparable(
        cold, str(tmp_path / "cold-site"))
    assert warm["argv"][1:] == ["a", "b"] and warm["name"] == "__main__"
    assert warm["stdin_is_null"] and warm["session_leader_is_parent"]
    assert warm["path"][1] == str(extra)  # PYTHONPATH right after the entry's own folder
    assert warm["traceparent"] == warm["env"]["TRACEPARENT"]  # not the zygote's (none)


FDS = ("import json, os; block = open('/proc/self/environ', 'rb').read().split(b'\\0'); "
       "print(json.dumps([sorted(os.listdir('/proc/self/fd')), "
       "sorted({e.split(b'=')[0].decode() for e in block if b'=' in e})]), flush=True)")
EXITS = "import atexit, sys; atexit.register(print, 'bye', flush=True); sys.exit(3)"


async def test_a_zygote_forked_by_cairn_up_is_a_fresh_ones_equal(
    tmp_path: Path, bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cairn up` forks each launcher's zygote from its own process (which imported the
    zygote's modules and read no secret): its workers must see what cold ones see, hold no
    descriptor of the forking process, and end as an interpreter would."""
    import sys

    from cairn.runtime.forked import ZYGOTE_FD_ENV, fork_zygote, preload

    preload((), zygote=True)
    proc, sock = fork_zygote(_warm.zygote_env(sys.executable, str(tmp_path / "warm-site")),
                             tmp_path / "zygote.log")
    stray = os.open(tmp_path / "held-by-the-forking-process", os.O_CREAT | os.O_RDWR)
    monkeypatch.setenv(ZYGOTE_FD_ENV, str(sock.detach()))
    warm = ProcessBackend(tmp_path / "warm-site", warm=True, **PLAIN)
    cold_backend = ProcessBackend(tmp_path / "cold-site", warm=False, **PLAIN)
    env = {"TZ": "UTC"}
    try:
        assert ZYGOTE_FD_ENV not in os.environ  # taken once: no worker inherits it
        for rank, entry in enumerate(("python -m probe a b", ["python", "-c", FDS])):
            cold = await run_probe(cold_backend, bundle, entry, rank=rank, study_env=env)
            seen = await run_probe(warm, bundle, entry, rank=rank, study_env=env)
            if isinstance(entry, str):
                assert seen["grandparent"] == proc.pid  # forked from the adopted zygote
                # This interpreter's flags but -B's (set from the environment, as a fresh
                # one does), which the sys.flags of a forked one keeps.
                drop = type(sys.flags).__match_args__.index("dont_write_bytecode")
                for side in (seen, cold):
                    del side["flags"][drop]
                assert comparable(seen, str(tmp_path / "warm-site")) == comparable(
                    cold, str(tmp_path / "cold-site"))
            else:
                # No descriptor of this process, nor the zygote's socket; nothing of the
                # environment it was started with in /proc/self/environ.
                assert seen[0] == cold[0]
                assert cold[1] and not set(seen[1]) - set(cold[1])
        handle = await warm.launch(make_spec(bundle, ["python", "-c", EXITS], rank=9,
                                             cpus=[0], trusted_code=True))
        ended = await warm.wait(handle)
        assert ended.exit_code == 3 and log_text(handle).splitlines()[-1] == "bye"
        assert warm.health()["warm"] == {"pid": proc.pid, "ready": True, "forked": 3,
                                         "adopted": True}
    finally:
        os.close(stray)
        await cold_backend.close()
        await warm.close()
    assert proc.wait(10) == 0  # the launcher's hang-up ends it


async def test_a_job_module_named_like_a_preloaded_one_starts_cold(
    bundle: Path, warm_backend: ProcessBackend
) -> None:
    # A fresh interpreter would import the job's json.py: the zygote already holds the
    # standard library's, so this launch must not come from it.
    (bundle / "json.py").write_text("import sys\nsys.modules[__name__].dumps = None\n"
                                    "MINE = True\n")
    (bundle / "main.py").write_text("import json, os\nprint(getattr(json, 'MINE', False))\n")
    handle = await warm_backend.launch(make_spec(bundle, "python main.py", trusted_code=True))
    assert (await warm_backend.wait(handle)).cause is None
    assert log_text(handle).strip() == "True"
    assert stat(int(handle.native_id)) is None  # a cold wrapper, reaped by us


async def test_interpreter_settings_in_the_env_start_cold(
    bundle: Path, warm_backend: ProcessBackend
) -> None:
    seen = await run_probe(warm_backend, bundle, "python -m probe",
                           study_env={"PYTHONHASHSEED": "0"})
    assert seen["grandparent"] == os.getpid()


async def test_other_programs_and_flags_start_cold(
    bundle: Path, warm_backend: ProcessBackend
) -> None:
    flagged = await run_probe(warm_backend, bundle, "python -u -m probe", rank=0)
    assert flagged["grandparent"] == os.getpid()
    plain = await run_probe(warm_backend, bundle, "python -m probe", rank=1)
    assert plain["grandparent"] == zygote_pid(warm_backend)
    (bundle / "run.sh").write_text("#!/bin/sh\nexec python -m probe\n")
    (bundle / "run.sh").chmod(0o755)
    shell = await run_probe(warm_backend, bundle, "./run.sh", rank=2)
    assert shell["grandparent"] != zygote_pid(warm_backend)


async def test_warm_workers_can_be_turned_off(
    tmp_path: Path, bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAIRN_WARM_WORKERS", "0")
    backend = ProcessBackend(tmp_path / "site", warm=True, **PLAIN)
    try:
        assert backend._zygote is None
        seen = await run_probe(backend, bundle, "python -m probe")
    finally:
        await backend.close()
    assert seen["grandparent"] == os.getpid()


async def test_a_dead_zygote_means_cold_starts_then_a_new_zygote(
    bundle: Path, warm_backend: ProcessBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await run_probe(warm_backend, bundle, "python -m probe", rank=0)
    old = zygote_pid(warm_backend)
    assert first["grandparent"] == old
    os.kill(old, signal.SIGKILL)
    for _ in range(100):  # gone, or a zombie its launcher has not reaped yet
        if (found := stat(old)) is None or found.state == "Z":
            break
        await asyncio.sleep(0.02)
    cold = await run_probe(warm_backend, bundle, "python -m probe", rank=1)
    assert cold["grandparent"] == os.getpid()  # launched all the same
    monkeypatch.setattr(_warm, "RESTART_AFTER_S", 0.0)
    await run_probe(warm_backend, bundle, "python -m probe", rank=2)  # starts a new zygote
    again = await run_probe(warm_backend, bundle, "python -m probe", rank=3)
    assert again["grandparent"] == zygote_pid(warm_backend) != old


async def test_warm_workers_outlive_the_launcher_and_are_found_again(
    tmp_path: Path, bundle: Path
) -> None:
    first = ProcessBackend(tmp_path / "site", warm=True)
    handle = await first.launch(make_spec(
        bundle, ["python", "-c", "import time; print('up', flush=True); time.sleep(60)"]))
    for _ in range(100):
        if "up" in log_text(handle):
            break
        await asyncio.sleep(0.05)
    old_zygote = zygote_pid(first)
    await first.close()
    for _ in range(250):  # the zygote leaves with its launcher, and is reaped
        if stat(old_zygote) is None:
            break
        await asyncio.sleep(0.02)
    assert stat(old_zygote) is None
    assert stat(int(handle.native_id)) is not None  # the worker did not

    second = ProcessBackend(tmp_path / "site", warm=True)
    try:
        assert await second.reattach(handle) == handle
        await second.cancel(handle, grace_s=2.0)
        ended = await second.wait(handle)
    finally:
        await second.close()
    assert (ended.cause, ended.exit_code) == ("cancelled", 128 + 15)
