"""A process worker's working directory and command line (its environment: `_env.py`).

Layout of `<site workdir>/workers/<launch id, '/' -> '_'>/`:

    ./              the code bundle, copied (cwd: `python -m pkg` finds it)
    worker.log      stdout and stderr
    .cairn/exit.json    how it ended (written by the wrapper)
    .cairn/allocation.json  what the worker could see of its allocation (written by it)
    .cairn/secrets/<NAME>   each secret_env value, mode 0400 (`<NAME>_FILE` in the env)
    .cairn/data/<dataset> -> source     $CAIRN_DATA

The bundle is copied, not linked: workers write into their cwd, and the unpacked bundle is
shared by every worker of the job. Datasets are symlinks; in the sandbox (`_sandbox.py`) each
source is mounted where its link points, read-only unless `mode: rw`. Without the sandbox
`mode: ro` is *not* enforced: the worker can write wherever its uid can.

Under a worker uid of its own the bundle copy is the worker's, while the folder itself and
`.cairn/` stay the launcher's (group: the worker's uid, mode 1770, sticky): the worker adds
files (its allocation report, its outputs) but cannot remove, rename or replace the log and
what the wrapper writes; once it has ended the folder is the launcher's alone (`take_back`).
Whatever the launcher reads back from a worker's folder is read with no link followed, only
from regular files and at most a bound (`read_under`): the job's code may have put a link to
the site's credentials where its allocation report or (off a uid of its own) its log was.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import stat
from pathlib import Path

import msgspec

from cairn.errors import Conflict, InvalidInput
from cairn.launcher.backends._exitcause import LOG_TAIL_BYTES, ExitRecord
from cairn.launcher.backends.base import LaunchSpec
from cairn.launcher.backends.errors import LaunchFailed
from cairn.worker.allocation import REPORT

_SAFE_DIR = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
LOG_NAME = "worker.log"
CONTROL_DIR = ".cairn"


def dir_name(launch_id: str) -> str:
    """The launch id as one directory name; refuses anything that could escape the root."""
    name = launch_id.replace("/", "_")
    if not _SAFE_DIR.fullmatch(name):
        raise InvalidInput(f"launch id {launch_id!r} cannot name a directory", field="launch_id")
    return name


def exit_path(workdir: str | Path) -> Path:
    return Path(workdir) / CONTROL_DIR / "exit.json"


def data_dir(workdir: str | Path) -> Path:
    return Path(workdir) / CONTROL_DIR / "data"


def secrets_dir(workdir: str | Path) -> Path:
    return Path(workdir) / CONTROL_DIR / "secrets"


def write_secrets(spec: LaunchSpec, folder: Path, owner: tuple[int, int] | None = None) -> None:
    """Each `secret_env` value as `folder/<NAME>`, mode 0400, in a new 0700 folder (given to
    `owner` (uid, gid) where the worker runs as another user). Blocking file I/O."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, value in spec.secret_env.items():
        path = folder / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o400)
        try:
            os.write(fd, value.encode("utf-8"))
            if owner is not None:
                os.fchown(fd, *owner)
        finally:
            os.close(fd)
    if owner is not None:
        os.chown(folder, *owner)


def numeric_owner(user: object) -> tuple[int, int] | None:
    """(uid, gid) of a container `user` setting written as numbers (`1000`, `1000:1000`), so
    the secret files are readable by it; None for root or a name (which only the image
    knows: run such workers as a numeric uid to give them secrets)."""
    if not user:
        return None
    uid, _, gid = str(user).partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        return None
    return int(uid), int(gid or uid)


def take_back(workdir: str | Path) -> None:
    """Once its worker has ended, the working directory is the launcher's alone again: what
    the worker left anywhere in it (a secret it copied, its data) is out of reach of its
    uid, and of the next worker to hold that uid. Its log and records stay for the launcher.
    """
    with contextlib.suppress(OSError):
        fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchown(fd, os.getuid(), os.getgid())
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)


def remove_secrets(folder: Path) -> None:
    """Delete a worker's secret files once it has ended (`folder` is `secrets_dir`; no link
    on the way is followed: the worker may have replaced `.cairn` with one)."""
    try:
        parent = _open_dir_under(folder.parent.parent, folder.parent.name)
    except OSError:
        return
    try:
        shutil.rmtree(folder.name, dir_fd=parent, ignore_errors=True)
    finally:
        os.close(parent)


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_dir_under(top: str | Path, relative: str) -> int:
    """A directory fd for `top/relative`, following no link below `top`."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [p for p in relative.split("/") if p not in ("", ".")]:
            if part == "..":
                raise OSError(f"{relative!r} leaves {top}")
            inner = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_under(top: str | Path, relative: str, offset: int = 0,
               size: int = 1024 * 1024) -> bytes:
    """Up to `size` bytes from `offset` of the regular file `top/relative`, following no
    link below `top` (not even a FIFO is opened: a worker owns that folder).

    Raises:
        OSError: missing, a link, not a regular file.
    """
    folder, _, name = relative.rpartition("/")
    parent = _open_dir_under(top, folder)
    try:
        fd = os.open(name, _FILE, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{relative} is not a regular file")
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def read_file(path: str | Path, offset: int = 0, size: int = 1024 * 1024) -> bytes:
    """`read_under` for a file directly inside a folder the worker cannot replace (its log
    in its working directory): the file itself may be anything the worker put there."""
    p = Path(path)
    return read_under(p.parent, p.name, offset, size)


def prepare_workdir(spec: LaunchSpec, root: Path, *, secrets: bool = False,
                    owner: int | None = None) -> Path:
    """Make the working directory: code copied in, datasets linked, and (with `secrets`) the
    secret files in its private `.cairn/secrets/`; with `owner`, the folder and all in it
    given to that uid (and gid), but `.cairn/` (see the module docstring). Blocking file I/O.

    Raises:
        Conflict: the directory exists (this launch id was launched before: reattach).
        LaunchFailed: the code bundle or a dataset source is missing, or copying failed.
    """
    workdir = root / "workers" / dir_name(spec.launch_id)
    code = Path(spec.code_dir)
    if not code.is_dir():
        raise LaunchFailed(f"code folder {code} does not exist", field="code_dir")
    for name, mount in spec.datasets.items():
        if not Path(mount.source).exists():
            raise LaunchFailed(
                f"dataset {name!r}: source {mount.source} does not exist", field="datasets"
            )
    workdir.parent.mkdir(parents=True, exist_ok=True)
    try:
        workdir.mkdir(mode=0o700)
    except FileExistsError:
        raise Conflict(
            f"{workdir} exists: launch {spec.launch_id} was started before", field="launch_id"
        ) from None
    try:
        shutil.copytree(code, workdir, symlinks=True, dirs_exist_ok=True)
        workdir.chmod(0o700)  # copytree copied the bundle's mode over ours
        data_dir(workdir).mkdir(parents=True, exist_ok=True)
        for name, mount in spec.datasets.items():
            (data_dir(workdir) / dir_name(name)).symlink_to(Path(mount.source).resolve())
        if owner is not None:
            _give(workdir, owner)
        if secrets and spec.secret_env:
            write_secrets(spec, secrets_dir(workdir),
                          owner=None if owner is None else (owner, owner))
    except OSError as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        raise LaunchFailed(f"cannot prepare {workdir}: {exc}") from exc
    return workdir


def _give(workdir: Path, uid: int) -> None:
    """The bundle copy to `uid`; the working directory and `.cairn/` stay the launcher's,
    group `uid`, mode 1770: the worker adds and changes files of its own there, and cannot
    remove, rename or replace the launcher's (its log, `.cairn/` and what is in it)."""
    for folder, dirs, files in os.walk(workdir):
        for name in (*dirs, *files):
            os.lchown(os.path.join(folder, name), uid, uid)
    for path in (data_dir(workdir), *data_dir(workdir).iterdir()):
        os.lchown(path, os.getuid(), os.getgid())
    for kept in (workdir / CONTROL_DIR, workdir):
        os.lchown(kept, os.getuid(), uid)
        kept.chmod(0o1770)


def split_entrypoint(entrypoint: str | list[str]) -> list[str]:
    """The entrypoint as argv: a string split as a shell would (but nothing expanded).

    Raises:
        InvalidInput: empty or unparsable.
    """
    try:
        argv = shlex.split(entrypoint) if isinstance(entrypoint, str) else list(entrypoint)
    except ValueError as exc:
        raise InvalidInput(f"entrypoint: {exc}", field="entrypoint") from exc
    if not argv:
        raise InvalidInput("entrypoint is empty", field="entrypoint")
    return argv


def worker_argv(entrypoint: str | list[str], path: str, cwd: Path) -> list[str]:
    """The entrypoint as argv (no shell); its program must be on the worker's PATH, or be a
    path (relative ones from the working directory).

    Raises:
        InvalidInput: empty or unparsable entrypoint.
        LaunchFailed: the program is not found.
    """
    argv = split_entrypoint(entrypoint)
    if os.sep in argv[0]:
        candidate = cwd / argv[0]  # an absolute argv[0] replaces cwd
        found = candidate.is_file() and os.access(candidate, os.X_OK)
    else:
        found = shutil.which(argv[0], path=path) is not None
    if not found:
        raise LaunchFailed(
            f"entrypoint program {argv[0]!r} is not on the worker PATH", field="entrypoint"
        )
    return argv


def read_outcome(workdir: str, log_path: str) -> tuple[ExitRecord | None, bytes]:
    """The wrapper's exit record (None when it left none) and the end of the log."""
    record = None
    with contextlib.suppress(OSError, msgspec.DecodeError):
        data = read_under(workdir, f"{CONTROL_DIR}/exit.json", size=64 * 1024)
        record = msgspec.json.decode(data, type=ExitRecord)
    return record, read_tail(log_path)


def read_allocation_mismatch(workdir: str) -> str | None:
    """What the worker's allocation report (`.cairn/allocation.json`) says was wrong; None
    when it found nothing wrong or left no report."""
    report = None
    with contextlib.suppress(OSError, msgspec.DecodeError):
        report = msgspec.json.decode(read_under(workdir, REPORT.replace(os.sep, "/")))
    if not isinstance(report, dict) or report.get("ok", True):
        return None
    return "; ".join(str(p) for p in report.get("problems") or []) or "allocation mismatch"


def read_tail(log_path: str) -> bytes:
    """The end of a worker's log (where a traceback's last line is); empty without one."""
    with contextlib.suppress(OSError):
        size = os.lstat(log_path).st_size
        return read_file(log_path, max(0, size - LOG_TAIL_BYTES), LOG_TAIL_BYTES)
    return b""


def read_chunk(path: Path, offset: int, size: int = 64 * 1024) -> bytes:
    """Up to `size` bytes of the log from `offset`; empty before the log exists (or when it
    is no longer a plain file: a worker may replace its log)."""
    try:
        return read_file(path, offset, size)
    except OSError:
        return b""
