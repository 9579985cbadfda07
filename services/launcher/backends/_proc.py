"""Process facts from /proc and waitpid, with a guard against pid reuse.

A pid alone does not name a process for long: once it is reaped, the kernel may hand the
number to a stranger. We record the start time (`/proc/<pid>/stat` field 22, clock ticks since
boot) at launch, and only treat a pid as our worker while that start time still matches.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from typing import NamedTuple


class ProcStat(NamedTuple):
    state: str
    start_ticks: int


class Poll(NamedTuple):
    """One look at a worker: still running, or ended (with its wait status when we reaped it)."""

    running: bool
    status: int | None = None


def stat(pid: int) -> ProcStat | None:
    """State and start time of a pid, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    return ProcStat(state=fields[0], start_ticks=int(fields[19]))


def start_ticks(pid: int) -> int | None:
    found = stat(pid)
    return None if found is None else found.start_ticks


def is_ours(pid: int, ticks: int | None) -> bool:
    """The pid still names our worker (running or a zombie): safe to signal its group."""
    found = stat(pid)
    return found is not None and (ticks is None or found.start_ticks == ticks)


def poll(pid: int, ticks: int | None) -> Poll:
    """Has our worker ended? Reaps it when it is our child; else reads /proc."""
    found = stat(pid)
    if found is None or (ticks is not None and found.start_ticks != ticks):
        return Poll(running=False)
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        # Not our child (we are a restarted launcher): its parent reaps it; a zombie is dead.
        return Poll(running=found.state not in ("Z", "X"))
    if reaped == 0:
        return Poll(running=True)
    return Poll(running=False, status=status)


def exit_code_of(status: int) -> int:
    """A wait status as an exit code, a signal death as 128 + signal (as shells and Docker)."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def signal_group(pgid: int, signum: int) -> bool:
    """Signal a process group; False when it is already gone."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def signal_name(signum: int) -> str:
    with contextlib.suppress(ValueError):
        return signal.Signals(signum).name
    return f"signal {signum}"


@contextlib.contextmanager
def exit_notice(pid: int, ticks: int | None,
                loop: asyncio.AbstractEventLoop) -> Iterator[asyncio.Event | None]:
    """An event set the moment our worker ends (a pidfd in the event loop), or None where
    pidfds do not work or the pid is already gone: then the caller polls.

    Works for a process that is not our child too (a restarted launcher's, a warm start's).
    """
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        yield None
        return
    try:
        # Opened before this check, the pidfd names the process the check saw: if the pid
        # was reused meanwhile, the start time differs and the caller polls instead.
        if not is_ours(pid, ticks):
            yield None
            return
        exited = asyncio.Event()

        def fired() -> None:
            loop.remove_reader(fd)  # it stays readable: once is enough
            exited.set()

        loop.add_reader(fd, fired)
        try:
            yield exited
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)
