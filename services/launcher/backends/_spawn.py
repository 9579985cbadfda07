"""Start a worker under `_exitwrap.py`, in a new session, with its output in `worker.log`."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from cairn.launcher.backends._exitwrap import GROUP_SIGNALS
from cairn.launcher.backends._memlimit import MemoryLimit
from cairn.launcher.backends._workdir import LOG_NAME, exit_path
from cairn.launcher.backends.errors import LaunchFailed

WRAPPER = Path(__file__).with_name("_exitwrap.py")


def spawn_worker(
    python: str,
    argv: list[str],
    env: dict[str, str],
    workdir: Path,
    cpus: list[int],
    limit: MemoryLimit,
) -> int:
    """Start the wrapper (which starts `argv`) and return its pid, also the process group id.

    `posix_spawn`, not `subprocess`: no `Popen` object whose finalizer warns about a child
    that is meant to outlive this launcher, and no `preexec_fn` in a threaded process (the
    wrapper, single-threaded, does the pre-exec work).

    Raises:
        LaunchFailed: the interpreter could not be started.
    """
    args = [
        str(exit_path(workdir)),
        str(workdir),
        ",".join(str(c) for c in cpus) or "-",
        limit.cgroup_procs or "-",
        str(limit.rlimit_as) if limit.rlimit_as else "-",
        "--",
        *argv,
    ]
    log_flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    try:
        return os.posix_spawn(
            python,
            # -I -S: the wrapper is standard library only; a study's PYTHONPATH or a user
            # site cannot change it, and it starts faster.
            [python, "-I", "-S", str(WRAPPER), *args],
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, str(workdir / LOG_NAME), log_flags, 0o600),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ],
            setsid=True,
            # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across
            # exec; the others may be ignored when the launcher runs under nohup.
            setsigdef=(
                signal.SIGPIPE,
                signal.SIGXFSZ,
                signal.SIGINT,
                signal.SIGTERM,
                signal.SIGHUP,
            ),
            # Blocked from the first instruction: a cancel right after the launch reaches
            # the worker once it unblocks them, never the wrapper (see _exitwrap.py).
            setsigmask=GROUP_SIGNALS,
        )
    except OSError as exc:
        raise LaunchFailed(f"cannot start the worker with {python}: {exc}") from exc
