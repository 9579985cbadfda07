"""The process backend's note of a worker it spawned (`_handles`): what a restarted launcher
believes of it, and what it refuses (a note of another launch, another backend, garbage)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cairn.launcher.backends import _handles
from cairn.launcher.backends.base import LaunchHandle

LAUNCH = "j-abc/site-a/client/0/0"


def handle(launch_id: str = LAUNCH, **changes: object) -> LaunchHandle:
    fields: dict[str, object] = dict(
        launch_id=launch_id, backend="process", native_id="4242", workdir="/w",
        log_path="/w/worker.log", started_at=datetime(2026, 3, 1, tzinfo=UTC),
        start_ticks=99, cpus=[1], timeout_s=30.0)
    fields.update(changes)
    return LaunchHandle(**fields)  # type: ignore[arg-type]


def test_a_note_reads_back_as_the_handle_and_is_private(tmp_path: Path) -> None:
    _handles.note(tmp_path, handle())
    assert _handles.read(tmp_path, LAUNCH) == handle()
    folder = tmp_path / _handles.HANDLES_DIR
    assert folder.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in folder.iterdir())
    assert [p.name for p in folder.iterdir()] == ["j-abc_site-a_client_0_0.json"]
    _handles.forget(tmp_path, LAUNCH)
    assert _handles.read(tmp_path, LAUNCH) is None


def test_no_note_is_none(tmp_path: Path) -> None:
    assert _handles.read(tmp_path, LAUNCH) is None


@pytest.mark.parametrize("content", [
    b"not json", b'{"launch_id": 3}', b"\xff" * 10, b"{" * 70_000,
])
def test_garbage_is_ignored_not_raised(tmp_path: Path, content: bytes) -> None:
    path = _handles.note_path(tmp_path, LAUNCH)
    path.parent.mkdir()
    path.write_bytes(content)
    assert _handles.read(tmp_path, LAUNCH) is None


@pytest.mark.parametrize("wrong", [
    handle("j-other/site-a/client/0/0"),  # a copy of another launch's note
    handle(backend="slurm"),
    handle(native_id="1; rm -rf /"),
])
def test_a_note_that_is_not_this_launchs_process_is_ignored(tmp_path: Path,
                                                            wrong: LaunchHandle) -> None:
    path = _handles.note_path(tmp_path, LAUNCH)
    _handles.note(tmp_path, wrong)
    if wrong.launch_id != LAUNCH:
        os.replace(_handles.note_path(tmp_path, wrong.launch_id), path)
    assert path.exists()
    assert _handles.read(tmp_path, LAUNCH) is None


def test_an_unwritable_folder_costs_only_the_note(tmp_path: Path) -> None:
    (tmp_path / _handles.HANDLES_DIR).write_text("a file where the folder goes")
    _handles.note(tmp_path, handle())  # logs, does not raise
    assert _handles.read(tmp_path, LAUNCH) is None
