"""Worker uids: each running process-backend worker under a uid of its own, from a range the
site reserves for Cairn (site.yaml `process.worker_uids`).

A worker's files, its `/proc` entries and its signals are then its own: another worker (of
any study) and the launcher's files are out of its reach by plain Unix permissions, sandbox
or not. A uid goes back to the pool when its worker ends, after every process still running
under it is killed (by definition leftovers of that worker: the range is Cairn's alone), and
is handed out again last (least recently used first), so what a worker left behind in a
world-writable folder is rarely met by the next holder of its uid. A uid that has processes
although no worker holds it (a worker the launcher lost track of) is skipped, never reused.

The pool is this launcher's memory; after a restart it learns the uids of the workers it
finds again from the group of their working directories (`claim`), and a uid some process
still runs as is never handed out, whatever the pool remembers.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
from collections import deque

from cairn.launcher.backends.errors import LaunchFailed
from cairn.spec.site import parse_uid_range as parse_range

__all__ = ["UidPool", "auto_range", "parse_range", "processes_of"]

AUTO_BASE = 1_600_000_000
AUTO_BLOCK = 1000
AUTO_BLOCKS = 200_000
"""`worker_uids: auto` (as root) takes a block of 1000 uids from 1600000000-1799999999: inside
the span systemd leaves unused (524288-1879048191), clear of login users, dynamic service
users, /etc/subuid's usual 100000+ ranges and systemd-nspawn's container ranges. The block
is chosen by the site's workdir, so the launchers of several sites on one host (`cairn up`)
do not share uids."""


def auto_range(workdir: str) -> range:
    """The `auto` block of uids for the site whose workdir this is."""
    digest = hashlib.sha256(os.path.realpath(workdir).encode()).digest()
    start = AUTO_BASE + int.from_bytes(digest[:8], "big") % AUTO_BLOCKS * AUTO_BLOCK
    return range(start, start + AUTO_BLOCK)


def processes_of(uid: int) -> list[int]:
    """Pids of the live processes (zombies are gone) whose real or effective uid is `uid`."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError), open(f"/proc/{entry.name}/status",
                                                    encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                        break
                    if line.startswith("Uid:"):
                        real, effective = line.split()[1:3]
                        if str(uid) in (real, effective):
                            found.append(int(entry.name))
                        break
    return found


class UidPool:
    """The uids of one backend's running workers."""

    def __init__(self, uids: range) -> None:
        self.uids = uids
        self._free: deque[int] = deque(uids)
        self._held: dict[str, int] = {}

    def take(self, launch_id: str) -> int:
        """A free uid for this launch, one no process runs as (blocking: reads /proc).

        Raises:
            LaunchFailed: every uid of the range is held (or has stray processes).
        """
        if launch_id in self._held:
            return self._held[launch_id]
        for _ in range(len(self._free)):
            uid = self._free.popleft()
            if processes_of(uid):
                self._free.append(uid)  # a stray worker we lost track of: never share it
                continue
            self._held[launch_id] = uid
            return uid
        raise LaunchFailed(f"all {len(self.uids)} worker uids ({self.uids.start}-"
                           f"{self.uids.stop - 1}) are in use; widen process.worker_uids")

    def claim(self, launch_id: str, uid: int) -> None:
        """A worker found again after a restart holds `uid`."""
        if uid in self.uids and self._held.get(launch_id) != uid:
            with contextlib.suppress(ValueError):
                self._free.remove(uid)
            self._held[launch_id] = uid

    def release(self, launch_id: str) -> None:
        """The worker ended: kill what still runs under its uid, and free the uid (last in
        line). Blocking: reads /proc."""
        uid = self._held.pop(launch_id, None)
        if uid is None:
            return
        for pid in processes_of(uid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self._free.append(uid)
