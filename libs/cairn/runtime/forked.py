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
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


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


def fork_service(services: Sequence[str], args: list[str], env: dict[str, str],
                 log: Path) -> ForkedProcess:
    """Fork a child that runs `cairn run SERVICES ARGS` in its own session, output to `log`."""
    argv = [*services, *args]
    pid = os.fork()
    if pid:
        return ForkedProcess(pid, argv)
    code = 1
    try:
        os.setsid()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.environ.clear()
        os.environ.update(env)
        from cairn.runtime.service import main

        code = main(argv)
    except BaseException:  # noqa: BLE001 - a child must never return into its parent's code
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def preload(services: Sequence[str]) -> None:
    """Import the services' modules here, once, so forked children share them."""
    import importlib

    from cairn.runtime.service import SERVICES

    for name in services:
        importlib.import_module(SERVICES[name].split(":")[0])
