"""Start a worker under `_exitwrap.py`, in a new session, with its output in `worker.log`;
in a sandboxed launch, bwrap starts the wrapper inside the worker's sandbox (`_sandbox.py`)."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

from cairn.launcher.backends import _proc
from cairn.launcher.backends._exitwrap import GROUP_SIGNALS
from cairn.launcher.backends._memlimit import MemoryLimit
from cairn.launcher.backends._sandbox import Sandbox
from cairn.launcher.backends._warm import Zygote
from cairn.launcher.backends._workdir import LOG_NAME, exit_path
from cairn.launcher.backends.errors import LaunchFailed

WRAPPER = Path(__file__).with_name("_exitwrap.py")
# What the exit wrapper keeps inside the sandbox: enough to start the worker under its uid.
WRAPPER_CAPS = ("CAP_SETUID", "CAP_SETGID")


async def start_worker(
    python: str,
    argv: list[str],
    env: dict[str, str],
    workdir: Path,
    cpus: list[int],
    limit: MemoryLimit,
    *,
    uid: int | None = None,
    sandbox: Sandbox | None = None,
    zygote: Zygote | None = None,
    datasets: Sequence[tuple[str, str, str]] = (),
    gpus: Sequence[str] = (),
) -> tuple[int, int | None]:
    """Start a worker, from the warm `zygote` where it can, else exec'd; in `sandbox` (with
    its `datasets`, (name, real source, mode), and `gpus`) and under `uid` where given.

    Returns:
        (the pid the launcher watches, also its process group; its start ticks).

    Raises:
        LaunchFailed: it could not be started (or a dataset may not be mounted).
    """
    def view(caps: Sequence[str] = ()) -> list[str] | None:
        if sandbox is None:
            return None
        return sandbox.argv(workdir, datasets=datasets, cgroup=limit.cgroup, gpus=gpus,
                            caps=caps)

    if zygote is not None:
        started = await zygote.spawn(argv, env, workdir, cpus, limit, uid=uid, sandbox=view(),
                                     holder=sandbox.holder if sandbox else "cat")
        if started is not None:
            return started
    pid = spawn_worker(python, argv, env, workdir, cpus, limit, uid=uid,
                       sandbox=view(WRAPPER_CAPS if uid is not None else ()))
    return pid, _proc.start_ticks(pid)


def spawn_worker(
    python: str,
    argv: list[str],
    env: dict[str, str],
    workdir: Path,
    cpus: list[int],
    limit: MemoryLimit,
    *,
    uid: int | None = None,
    sandbox: list[str] | None = None,
) -> int:
    """Start the wrapper (which starts `argv`) and return its pid, also the process group id:
    with `sandbox` (bwrap and its options), bwrap's, whose first process is the wrapper.

    `posix_spawn`, not `subprocess`: no `Popen` object whose finalizer warns about a child
    that is meant to outlive this launcher, and no `preexec_fn` in a threaded process (the
    wrapper, single-threaded, does the pre-exec work).

    Raises:
        LaunchFailed: the interpreter (or bwrap) could not be started.
    """
    args = [
        str(exit_path(workdir)),
        str(workdir),
        ",".join(str(c) for c in cpus) or "-",
        limit.cgroup_procs or "-",
        str(limit.rlimit_as) if limit.rlimit_as else "-",
        "-" if uid is None else str(uid),
        "--",
        *argv,
    ]
    # -I -S: the wrapper is standard library only; a study's PYTHONPATH or a user site cannot
    # change it, and it starts faster.
    command = [python, "-I", "-S", str(WRAPPER), *args]
    if sandbox is not None:
        command = [*sandbox, "--", *command]
    log_flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    try:
        return os.posix_spawn(
            command[0],
            command,
            env,
            file_actions=[
                # Nothing the launcher was handed open by whoever started it reaches the job.
                *((os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds()),
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
            # the worker once it unblocks them, never the wrapper (see _exitwrap.py), nor
            # bwrap and its init, which never unblock them.
            setsigmask=GROUP_SIGNALS,
        )
    except OSError as exc:
        raise LaunchFailed(f"cannot start the worker with {command[0]}: {exc}") from exc


def _inheritable_fds() -> list[int]:
    """This process's open file descriptors past stderr that an exec would pass on."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    found.append(fd)
            except OSError:
                pass  # the listing's own descriptor, closed by now
    return found
