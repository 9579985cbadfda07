"""The backend seam and the process backend's pure parts: loading, classification, argv."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from cairn.errors import InvalidInput
from cairn.launcher.backends import (
    Backend,
    Capability,
    LaunchFailed,
    LaunchHandle,
    LaunchSpec,
    _proc,
    load_backend,
    make_launch_id,
)
from cairn.launcher.backends._exitcause import ExitRecord, Observed, classify, ran_out_of_memory
from cairn.launcher.backends._memlimit import MECHANISMS, memory_limit_mechanism
from cairn.launcher.backends._workdir import dir_name, worker_argv
from cairn.launcher.backends.process import ProcessBackend


def spec(**kw: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "launch_id": make_launch_id("j1", "site-a", "client", 2, 1),
        "job": "j1",
        "study": "lung",
        "site": "site-a",
        "role": "client",
        "entrypoint": "python -m app",
        "code_dir": "/nowhere",
    }
    fields.update(kw)
    return LaunchSpec(**fields)  # type: ignore[arg-type]


def test_launch_id_is_deterministic_and_names_one_directory() -> None:
    assert make_launch_id("j1", "site-a", "client", 2, 1) == "j1/site-a/client/2/1"
    assert dir_name("j1/site-a/client/2/1") == "j1_site-a_client_2_1"
    for bad in ("../../etc", "/abs", "a b/c", ".hidden/x"):
        with pytest.raises(InvalidInput):
            dir_name(bad)


def test_load_backend_by_name(tmp_path: Path) -> None:
    backend = load_backend("process", workdir=str(tmp_path))
    assert isinstance(backend, Backend) and backend.name == "process"
    assert Capability.CANCEL | Capability.RECONCILE in backend.capabilities
    assert Capability.CONTAINERS not in backend.capabilities


@pytest.mark.parametrize(
    ("name", "options", "says"),
    [
        ("podman", {}, "unknown backend 'podman'"),
        ("slurm", {}, "bad options for backend .slurm.: .*workdir"),
        ("process", {"workdir": "/x", "colour": "red"}, "bad options"),
        ("process", {"workdir": "/x", "memory_limit": "magic"}, "memory_limit 'magic'"),
    ],
)
def test_load_backend_refuses_with_a_reason(name: str, options: dict[str, str], says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        load_backend(name, **options)


def test_memory_limit_mechanism_is_one_of_the_known() -> None:
    assert memory_limit_mechanism() in MECHANISMS
    assert memory_limit_mechanism() != "none"  # Linux always has RLIMIT_AS


def test_handle_survives_a_round_trip_through_json() -> None:
    handle = LaunchHandle(
        launch_id="j1/site-a/client/0/0",
        backend="process",
        native_id="42",
        workdir="/w",
        log_path="/w/worker.log",
        started_at=datetime(2025, 1, 1, tzinfo=UTC),
        start_ticks=123,
        cpus=[0, 1],
        timeout_s=30.0,
    )
    assert msgspec.json.decode(msgspec.json.encode(handle), type=LaunchHandle) == handle


@pytest.mark.parametrize(
    ("seen", "code", "cause"),
    [
        (Observed(record=ExitRecord(code=0)), 0, None),
        (Observed(record=ExitRecord(code=2)), 2, "crashed"),
        (Observed(record=ExitRecord(signal=11)), 139, "crashed"),
        (Observed(record=ExitRecord(error="no such file")), None, "launch-failed"),
        (Observed(record=ExitRecord(signal=15), cancelled=True), 143, "cancelled"),
        (Observed(status_code=137, cancelled=True), 137, "cancelled"),
        (Observed(status_code=137, timed_out=True, timeout_s=5), 137, "timeout"),
        (Observed(status_code=137, oom_kills=1, memory_limit="cgroup-v1"), 137, "oom"),
        (Observed(record=ExitRecord(code=1), log_tail=b"Traceback\nMemoryError\n"), 1, "oom"),
        (Observed(record=ExitRecord(code=0), log_tail=b"MemoryError\n"), 0, None),
        (Observed(), None, "infrastructure"),
    ],
)
def test_classify(seen: Observed, code: int | None, cause: str | None) -> None:
    assert classify(seen)[:2] == (code, cause)


def test_out_of_memory_lines() -> None:
    assert ran_out_of_memory(b"  File x\nMemoryError\n\n")
    assert ran_out_of_memory(b"torch.OutOfMemoryError: CUDA out of memory\n")
    assert ran_out_of_memory(b"terminate called after throwing 'std::bad_alloc'\n")
    assert not ran_out_of_memory(b"MemoryError handled, retrying\nValueError: bad\n")


def test_worker_argv(tmp_path: Path) -> None:
    path = os.environ["PATH"]
    assert worker_argv("python -m app --name 'a b'", path, tmp_path) == [
        "python",
        "-m",
        "app",
        "--name",
        "a b",
    ]
    assert worker_argv(["python", "-c", "pass"], path, tmp_path)[0] == "python"
    with pytest.raises(InvalidInput):
        worker_argv("python 'unclosed", path, tmp_path)
    with pytest.raises(InvalidInput):
        worker_argv("", path, tmp_path)
    with pytest.raises(LaunchFailed):
        worker_argv("./missing.sh", path, tmp_path)


def test_proc_stat_reads_our_own_start_time() -> None:
    found = _proc.stat(os.getpid())
    assert found is not None and found.state in "RS"
    assert _proc.is_ours(os.getpid(), found.start_ticks)
    assert not _proc.is_ours(os.getpid(), found.start_ticks + 1)


async def test_cpus_outside_the_allowed_set_are_refused(tmp_path: Path) -> None:
    backend = ProcessBackend(tmp_path)
    with pytest.raises(InvalidInput, match="not available"):
        await backend.launch(spec(cpus=[max(os.sched_getaffinity(0)) + 1000]))


def test_a_spec_never_shows_its_secrets() -> None:
    shown = repr(spec(secret_env={"DB_PASSWORD": "hunter2"}))
    assert "hunter2" not in shown and "DB_PASSWORD" in shown and "j1/site-a" in shown


def _process_backend_is_a_backend(backend: ProcessBackend) -> Backend:
    return backend  # mypy checks that ProcessBackend satisfies the protocol
