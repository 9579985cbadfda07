"""How much memory a tree of processes holds, sampled from /proc (Linux).

`cairn sim` reports its peak: every process it started (the nats-server, the parents, the
warm interpreters, every worker) and itself. RSS counts a page shared by a forked worker and
its zygote once per process; PSS (proportional set size, `smaps_rollup`) splits it among
them, so it is the figure that adds up. Where /proc cannot be read, both are 0.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

PROC = "/proc"


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(PROC):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"{PROC}/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                    stat = f.read()
                ppid = int(stat[stat.rindex(")") + 2:].split()[1])
                tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(roots: Iterable[int]) -> set[int]:
    """The roots that still run and every process below them."""
    tree, seen = _children(), set()
    todo = [r for r in roots if os.path.exists(f"{PROC}/{r}")]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(tree.get(pid, ()))
    return seen


def _kib(path: str, key: str) -> int:
    with contextlib.suppress(OSError, ValueError), open(path, encoding="ascii") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


@dataclass
class Usage:
    rss_bytes: int = 0
    pss_bytes: int = 0
    processes: int = 0


def usage(pids: Iterable[int]) -> Usage:
    """Summed RSS and PSS of `pids`."""
    out = Usage()
    for pid in pids:
        out.rss_bytes += _kib(f"{PROC}/{pid}/status", "VmRSS:") * 1024
        out.pss_bytes += _kib(f"{PROC}/{pid}/smaps_rollup", "Pss:") * 1024
        out.processes += 1
    return out


class PeakMemory:
    """Samples the tree under `roots()` on a thread until stopped; keeps the peaks."""

    def __init__(self, roots: Callable[[], list[int]], interval_s: float = 1.0) -> None:
        self.roots = roots
        self.interval_s = interval_s
        self.peak = Usage()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cairn-peak-mem")

    def sample(self) -> Usage:
        now = usage(descendants([os.getpid(), *self.roots()]))
        self.peak = Usage(rss_bytes=max(self.peak.rss_bytes, now.rss_bytes),
                          pss_bytes=max(self.peak.pss_bytes, now.pss_bytes),
                          processes=max(self.peak.processes, now.processes))
        return now

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> PeakMemory:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
