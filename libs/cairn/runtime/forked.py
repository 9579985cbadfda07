"""Parents forked from one process that has already imported them.

`cairn up` starts several service parents at once. Each would spend about half a CPU-second
importing the same modules (nats-py, asyncio, msgspec, the services), which on a small machine
is most of the time to healthy. Forked from a process that imported them once, they share
those pages and start at once. Only for a process with no running event loop and no threads
(the `cairn up` command before it starts its own loop); tests and libraries spawn instead.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ZYGOTE_FD_ENV = "CAIRN_ZYGOTE_FD"
"""Set for a parent forked with a warm interpreter of its own (`fork_zygote`): the
descriptor of its end of the zygote's socket, for its launcher to take."""


class ForkedProcess:
    """The parts of `subprocess.Popen` that `EmbeddedFederation` uses, for a forked child."""

    def __init__(self, pid: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_main(cmd: list[str], run: Callable[[], int], env: dict[str, str], log: Path,
              *, close: Sequence[socket.socket] = ()) -> ForkedProcess:
    """Fork a child that calls `run()` in its own session, output to `log`, and exits with
    what it returns. `cmd` is the command that starts the same process afresh (what
    `EmbeddedFederation.respawn` runs); `close` are this process's sockets the child must
    not hold (another parent's end of its warm interpreter's socket)."""
    pid = os.fork()
    if pid:
        return ForkedProcess(pid, cmd)
    code = 1
    try:
        os.setsid()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        for sock in close:
            sock.close()
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(null)
        os.close(out)
        os.environ.clear()
        os.environ.update(env)
        code = run()
    except BaseException:  # noqa: BLE001 - a child must never return into its parent's code
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def fork_service(services: Sequence[str], args: list[str], env: dict[str, str],
                 log: Path, *, close: Sequence[socket.socket] = ()) -> ForkedProcess:
    """Fork a child that runs `cairn run SERVICES ARGS` in its own session, output to `log`."""
    argv = [*services, *args]

    def run() -> int:
        from cairn.runtime.service import main

        return main(argv)

    return fork_main([sys.executable, "-m", "cairn.runtime._serve", *argv], run, env, log,
                     close=close)


def fork_authority(args: list[str], env: dict[str, str], log: Path, *,
                   close: Sequence[socket.socket] = ()) -> ForkedProcess:
    """Fork the authority (`python -m cairn.authority ARGS`) from this process."""

    def run() -> int:
        from cairn.authority.__main__ import main

        return main(args)

    return fork_main([sys.executable, "-m", "cairn.authority", *args], run, env, log,
                     close=close)


def fork_zygote(env: dict[str, str], log: Path, *,
                close: Sequence[socket.socket] = ()) -> tuple[ForkedProcess, socket.socket]:
    """Fork a launcher's warm interpreter (`cairn.launcher.backends._zygote`) from this
    process, which must have imported its modules (`preload`) and read no secret yet: what
    it holds, every worker forked from it holds. Returns the zygote and the launcher's end
    of its socket (`CAIRN_ZYGOTE_FD` tells the launcher which descriptor it is)."""
    ours, theirs = socket.socketpair()

    def run() -> int:
        from cairn.launcher.backends._zygote import serve_forked

        return serve_forked(theirs)

    try:
        proc = fork_main([], run, env, log, close=[*close, ours])
    finally:
        theirs.close()
    return proc, ours


def preload(services: Sequence[str], *, authority: bool = False, zygote: bool = False) -> None:
    """Import the services' modules here, once, so forked children share them: with
    `authority`, the authority's; with `zygote`, what a warm interpreter preloads."""
    import gc
    import importlib

    from cairn.runtime.service import SERVICES

    for name in services:
        importlib.import_module(SERVICES[name].split(":")[0])
    if authority:
        importlib.import_module("cairn.authority.service")
        importlib.import_module("cairn.authority.__main__")
    if zygote:
        from cairn.launcher.backends._zygote import preload_workers

        preload_workers()
    # What is imported now lives as long as every child: out of the collector's sight, a
    # collection in a child does not touch (and so copy) the pages they share.
    gc.freeze()
