"""Timestamps of the phases of a start, for `make bench` (tools/bench_perf.py).

Off unless `CAIRN_PHASES` names a file: then every `mark` appends one JSON line to it
(`{"t": unix seconds, "pid": ..., "phase": ..., ...}`), from whichever process reaches that
phase (`cairn up`, the authority, each parent). Appends of one short line are atomic, so
several processes may share the file. Costs one environment lookup when off.
"""

from __future__ import annotations

import json
import os
import time

ENV = "CAIRN_PHASES"


def mark(phase: str, **fields: str | float) -> None:
    """Note that `phase` was reached now (when `CAIRN_PHASES` is set)."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({"t": time.time(), "pid": os.getpid(), "phase": phase, **fields})
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        return  # a benchmark's aid: never a reason for a start to fail
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read(path: str | os.PathLike[str]) -> list[dict[str, object]]:
    """The marks in `path`, in file order (unreadable lines skipped)."""
    out: list[dict[str, object]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if isinstance(item, dict):
                    out.append(item)
    except OSError:
        pass
    return out
