"""The process backend's note of each worker it started, written the moment the spawn
returns: a launcher killed before its launch record held the handle (the window between a
submit and `LauncherService.record`) finds the worker again at start (`ProcessBackend.find`),
as a Slurm launcher finds its job by comment and a Kubernetes one its pod by label.

Layout: `<site workdir>/handles/<launch id, '/' -> '_'>.json`, the `LaunchHandle` as JSON,
mode 0600 in a 0700 folder of the launcher's. The site workdir is outside every worker's
view (a protected path of the sandbox; off the sandbox, a uid of the worker's own cannot
enter it), so job code can neither forge a note nor point one at another process; and a
note is only ever believed for a pid that still has the noted start time (`_proc`).

A note lives as long as its worker: it is removed once the worker's end is known. A note
that cannot be written (a full disk) costs only the finding: the launcher says so and the
worker runs on, found again through its launch record once that is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import msgspec

from cairn.errors import InvalidInput
from cairn.files import SMALL_FILE_BYTES, read_bytes
from cairn.launcher.backends._workdir import dir_name
from cairn.launcher.backends.base import LaunchHandle

log = logging.getLogger("cairn.launcher")

HANDLES_DIR = "handles"
_DECODER = msgspec.json.Decoder(LaunchHandle)


def note_path(root: Path, launch_id: str) -> Path:
    return root / HANDLES_DIR / f"{dir_name(launch_id)}.json"


def note(root: Path, handle: LaunchHandle) -> None:
    """Write `handle`'s note atomically (a reader never sees half of one); blocking, and
    small enough to be written on the event loop right after the spawn."""
    path = note_path(root, handle.launch_id)
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        partial = path.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, msgspec.json.encode(handle))
        finally:
            os.close(fd)
        os.replace(partial, path)
    except OSError as exc:
        log.warning("cannot note worker %s (pid %s) in %s: %s; it is found again after a "
                    "restart only once its launch record holds it", handle.launch_id,
                    handle.native_id, path.parent, exc)


def read(root: Path, launch_id: str) -> LaunchHandle | None:
    """The note of `launch_id`, or None: none was written, or one that does not read as a
    note of this launch (said once in the log, never raised: a start goes on)."""
    path = note_path(root, launch_id)
    if not path.exists():
        return None
    try:
        data = read_bytes(path, limit=SMALL_FILE_BYTES)
    except InvalidInput as exc:
        log.warning("ignoring the worker note %s: %s", path, exc)
        return None
    try:
        handle = _DECODER.decode(data)
    except msgspec.DecodeError as exc:
        log.warning("ignoring the worker note %s: %s", path, exc)
        return None
    if handle.launch_id != launch_id or handle.backend != "process" or \
            not handle.native_id.isdigit():
        log.warning("ignoring the worker note %s: it is not of a process worker of %s",
                    path, launch_id)
        return None
    return handle


def forget(root: Path, launch_id: str) -> None:
    """Remove the note of a worker whose end is known (blocking)."""
    with contextlib.suppress(OSError, InvalidInput):
        note_path(root, launch_id).unlink(missing_ok=True)
