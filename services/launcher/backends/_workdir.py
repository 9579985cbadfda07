"""A process worker's working directory, environment and command line.

Layout of `<site workdir>/workers/<launch id, '/' -> '_'>/`:

    ./              the code bundle, copied (cwd: `python -m pkg` finds it)
    worker.log      stdout and stderr
    .cairn/exit.json    how it ended (written by the wrapper)
    .cairn/data/<dataset> -> source     $CAIRN_DATA

The bundle is copied, not linked: workers write into their cwd, and the unpacked bundle is
shared by every worker of the job. Datasets are symlinks, so `mode: ro` is *not* enforced for
a plain process: the worker runs as the launcher's user and can write wherever that user can.
Sites that need read-only data use a container backend or file permissions on the source.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
from pathlib import Path

import msgspec

from cairn.errors import Conflict, InvalidInput
from cairn.launcher.backends._exitcause import LOG_TAIL_BYTES, ExitRecord
from cairn.launcher.backends.base import LaunchSpec
from cairn.launcher.backends.errors import LaunchFailed

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


def prepare_workdir(spec: LaunchSpec, root: Path) -> Path:
    """Make the working directory: code copied in, datasets linked. Blocking file I/O.

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
    except OSError as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        raise LaunchFailed(f"cannot prepare {workdir}: {exc}") from exc
    return workdir


def base_env(python: str, home: str) -> dict[str, str]:
    """What every worker's environment starts from (and the warm interpreter's)."""
    return {
        # Our interpreter's bin dir first: `python` in an entrypoint is the launcher's Python.
        "PATH": os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", os.defpath)]),
        "HOME": os.environ.get("HOME", home),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONUNBUFFERED": "1",  # so worker.log is live, not flushed at exit
    }


def worker_env(spec: LaunchSpec, workdir: Path, python: str) -> dict[str, str]:
    """The worker's whole environment: nothing of the launcher's leaks but PATH, HOME, LANG.

    Later layers win, and the contract comes last so that a study env can never shadow
    `CAIRN_*` or hide GPUs; the backend's own facts (real paths, granted GPUs) win over all.
    """
    env = base_env(python, home=str(workdir))
    env.update(spec.study_env)
    env.update(spec.secret_env)
    env.update(spec.env)
    env["CAIRN_WORKDIR"] = str(workdir)
    env["CAIRN_DATA"] = str(data_dir(workdir))
    # Empty, not unset: an unset variable means "every GPU" to CUDA.
    env["CUDA_VISIBLE_DEVICES"] = ",".join(spec.gpus)
    return env


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
        record = msgspec.json.decode(exit_path(workdir).read_bytes(), type=ExitRecord)
    return record, read_tail(log_path)


def read_tail(log_path: str) -> bytes:
    """The end of a worker's log (where a traceback's last line is); empty without one."""
    with contextlib.suppress(OSError), open(log_path, "rb") as fh:
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - LOG_TAIL_BYTES))
        return fh.read()
    return b""


def read_chunk(path: Path, offset: int, size: int = 64 * 1024) -> bytes:
    """Up to `size` bytes of the log from `offset`; empty before the log exists."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(size)
    except FileNotFoundError:
        return b""
