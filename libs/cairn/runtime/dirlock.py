"""One `cairn up` per directory.

Two federations on one `--dir` would share one JetStream store and one `nats.conf`: the second
rewrites the config and the remembered port of the first, whose next nats-server restart then
comes back somewhere else. So a federation holds an exclusive `flock` on `DIR/up.lock` while it
runs, and writes there who it is (its pid, its NATS URL, the pids of what it started). The lock
is the kernel's: it goes when the process does, however it ends, so a lock is never stale.

What it started can outlive it (a `kill -9` of `cairn up` leaves the nats-server and the
parents running, each in its own session): a new claim on the directory is refused while any of
those recorded processes still lives, since a second nats-server on the same store is exactly
what the lock is for. `cairn down` stops such leftovers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from cairn.errors import Conflict

LOCK_FILE = "up.lock"
_RECORD_SIZE = 4096
"""The record is written in place, padded to this size, in one write: a reader sees the old
record or the new one, never an empty file (the file itself is never replaced, since a new
inode would be a new, free lock)."""

_held: set[int] = set()


def _close_in_child() -> None:
    # A forked parent must not inherit the lock: it would keep the directory locked after
    # `cairn up` itself has gone, and a later `cairn up` could never tell the two apart.
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


@dataclass(frozen=True)
class Started:
    """A process a federation started, told apart from a later one with the same pid by
    its start time (in clock ticks since boot, from /proc; 0 where there is no /proc)."""

    name: str
    pid: int
    start: int = 0

    def alive(self) -> bool:
        return _start_time(self.pid) == self.start if self.start else pid_alive(self.pid)


@dataclass(frozen=True)
class Holder:
    """What a lock file says of the `cairn up` that holds (or held) it."""

    pid: int | None = None
    url: str | None = None
    started: tuple[Started, ...] = field(default=())
    start: int = 0
    """The holder's own start time (see `Started`)."""

    def running(self) -> bool:
        """Whether the `cairn up` that wrote this still runs."""
        return self.pid is not None and Started("cairn up", self.pid, self.start).alive()

    def leftovers(self) -> list[Started]:
        """The processes it started that still run."""
        return [s for s in self.started if s.alive()]


def read_holder(dir_: Path) -> Holder | None:
    """The record in `DIR/up.lock` (None: no file, or nothing readable in it)."""
    try:
        raw = (dir_ / LOCK_FILE).read_bytes()
    except OSError:
        return None
    try:
        data = json.loads(raw.decode("utf-8").strip() or "null")
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    started = []
    for item in data.get("started") or []:
        if (isinstance(item, dict) and isinstance(item.get("pid"), int)
                and isinstance(item.get("start", 0), int)):
            started.append(Started(str(item.get("name", "?")), item["pid"], item.get("start", 0)))
    pid, url, start = data.get("pid"), data.get("url"), data.get("start")
    return Holder(pid=pid if isinstance(pid, int) else None,
                  url=url if isinstance(url, str) else None, started=tuple(started),
                  start=start if isinstance(start, int) else 0)


class DirLock:
    """The exclusive claim of one process on a federation directory."""

    def __init__(self, dir_: Path, fd: int) -> None:
        self.dir = dir_
        self._fd: int | None = fd
        self._url: str | None = None

    @classmethod
    def acquire(cls, dir_: Path) -> DirLock:
        """Claim `dir_` for this process.

        Raises:
            Conflict: another `cairn up` runs there (the message names its pid and URL), or
                processes an earlier one started there still run.
        """
        dir_.mkdir(parents=True, exist_ok=True)
        path = dir_ / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise Conflict(_running_message(dir_, read_holder(dir_))) from None
        except OSError:
            os.close(fd)
            raise
        previous = read_holder(dir_)
        left = previous.leftovers() if previous else []
        if left:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            assert previous is not None
            raise Conflict(_leftover_message(dir_, previous, left))
        lock = cls(dir_, fd)
        _held.add(fd)
        lock.record(())
        return lock

    def record(self, started: tuple[Started, ...] | list[Started], url: str | None = None
               ) -> None:
        """Say who holds the directory: this pid, the NATS URL once known, and what it
        started (so a later claim can find what outlived it)."""
        if self._fd is None:
            return
        self._url = url or self._url
        data = {"pid": os.getpid(), "start": _start_time(os.getpid()) or 0, "url": self._url,
                "started": [{"name": s.name, "pid": s.pid, "start": s.start} for s in started]}
        text = json.dumps(data, separators=(",", ":")).encode()
        if len(text) >= _RECORD_SIZE:
            text = json.dumps({"pid": os.getpid(), "url": self._url}).encode()
        os.pwrite(self._fd, text.ljust(_RECORD_SIZE - 1) + b"\n", 0)

    def release(self) -> None:
        """Clear the record and let the directory go (the file stays: it is the lock)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _held.discard(fd)
        with contextlib.suppress(OSError):
            os.pwrite(fd, b" " * (_RECORD_SIZE - 1) + b"\n", 0)
        os.close(fd)


def started(name: str, pid: int) -> Started:
    """The record of a process this one just started."""
    return Started(name, pid, _start_time(pid) or 0)


def stop_leftovers(left: list[Started], timeout: float = 15.0) -> list[Started]:
    """SIGTERM each leftover, SIGKILL what is still there after `timeout`; returns those
    that were stopped."""
    for s in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(s.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(s.alive() for s in left) and time.monotonic() < deadline:
        time.sleep(0.05)
    for s in left:
        if s.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(s.pid, signal.SIGKILL)
    return left


def _running_message(dir_: Path, holder: Holder | None) -> str:
    who = f"pid {holder.pid}" if holder and holder.pid else "pid unknown"
    where = f", NATS {holder.url}" if holder and holder.url else ", still starting"
    return (f"cairn up already runs in {dir_} ({who}{where}): `cairn down --dir {dir_}` "
            "stops it, or use another --dir; nothing was changed")


def _leftover_message(dir_: Path, holder: Holder, left: list[Started]) -> str:
    names = ", ".join(f"{s.name} pid {s.pid}" for s in left)
    pids = " ".join(str(s.pid) for s in left)
    by = f"cairn up pid {holder.pid}" if holder.pid else "an earlier cairn up"
    return (f"{dir_} is still served by what {by} (no longer running) started: {names}"
            f"{f' (NATS {holder.url})' if holder.url else ''}. Stop them first: "
            f"`cairn down --dir {dir_}` or `kill {pids}`; nothing was changed")


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` runs (another user's too); a zombie runs nothing."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    status = Path(f"/proc/{pid}/status")
    try:
        return "\nState:\tZ" not in status.read_text()
    except OSError:
        return True  # it was there a moment ago; /proc may not say more


def _start_time(pid: int) -> int | None:
    """The process's start time from /proc/PID/stat; None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])
