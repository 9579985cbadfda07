"""Benchmark: what the process backend's isolation adds to a worker's start, in one run.

For cold (exec'd) and warm (forked from the zygote) workers: `ProcessBackend.launch` until the
worker's first statement ran, with the site's default isolation (a bubblewrap sandbox, and a
uid of its own as root) and with none (`sandbox: none, worker_uids: none`, trusted code).
Runs alternate between the two, so load on the machine falls on both; medians (and minima,
which load sways less) of `RUNS`. The overhead is the difference of the medians (target:
under 20 ms); the load average at the start is recorded beside it.

Also bwrap alone: posix_spawn of `bwrap <the worker's view> -- true` next to `true`, which is
what the sandbox costs before any Python runs. Needs bwrap; skipped without.
`make bench` (tools/bench.py) calls `run()`; run alone with `python tools/bench_sandbox.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TOOLS = Path(__file__).resolve().parent
for path in (REPO, TOOLS):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_launchers import _spec, _written  # noqa: E402 - after the path is set

RUNS = 15
PLAIN = {"sandbox": "none", "worker_uids": "none"}


def _say(message: str) -> None:
    print(f"[bench sandbox] {message}", file=sys.stderr, flush=True)


def _ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


async def _starts(root: Path, warm: bool) -> dict[str, Any]:
    from cairn.launcher.backends.process import ProcessBackend

    code = root / "code"
    code.mkdir(exist_ok=True)
    isolated = ProcessBackend(root / f"isolated-{warm}", poll_s=0.05, warm=warm)
    plain = ProcessBackend(root / f"plain-{warm}", poll_s=0.05, warm=warm, **PLAIN)
    times: dict[str, list[float]] = {"isolated": [], "plain": []}
    try:
        backends = (("isolated", isolated), ("plain", plain))
        if warm:  # each zygote starts once, before the first measured launch needs it
            for _, backend in backends:
                await backend.wait(await backend.launch(_spec(code, 999, trusted_code=True)))
        for i in range(RUNS):
            for name, backend in backends if i % 2 == 0 else backends[::-1]:
                started = time.time()
                handle = await backend.launch(_spec(code, i, trusted_code=True))
                times[name].append(await _written(Path(handle.workdir) / "first_line")
                                   - started)
                await backend.wait(handle)
        summary = isolated.isolation.summary()
    finally:
        await isolated.close()
        await plain.close()
    return {"isolated_ms": _ms(times["isolated"]), "plain_ms": _ms(times["plain"]),
            "overhead_ms": round(_ms(times["isolated"]) - _ms(times["plain"]), 2),
            "overhead_min_ms": round((min(times["isolated"]) - min(times["plain"])) * 1000, 2),
            "runs": RUNS, "isolation": summary}


def _spawn_ms(argv: list[str], runs: int = 30) -> float:
    took: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin"})
        os.waitpid(pid, 0)
        took.append(time.perf_counter() - started)
    return _ms(took)


def _bwrap_alone(root: Path) -> dict[str, Any]:
    from cairn.launcher.backends.process import ProcessBackend

    box = ProcessBackend(root / "bwrap-alone").isolation.sandbox
    assert box is not None
    folder = root / "bwrap-alone" / "workers" / "w"
    folder.mkdir(parents=True)
    box.refresh()
    view = box.argv(folder)
    true = shutil.which("true") or "/bin/true"
    with_bwrap, without = _spawn_ms([*view, "--", true]), _spawn_ms([true])
    return {"bwrap_true_ms": with_bwrap, "true_ms": without,
            "overhead_ms": round(with_bwrap - without, 2), "view_args": len(view)}


async def run() -> dict[str, Any]:
    """Median ms from launch to the worker's first statement, isolated vs not."""
    from cairn.launcher.backends._sandbox import find_bwrap

    if find_bwrap() is None:
        return {"skipped": "needs bwrap: apt-get install bubblewrap"}
    load = round(os.getloadavg()[0], 2)  # this machine's other work sways every number
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-sandbox-"))
    try:
        out: dict[str, Any] = {}
        for warm in (False, True):
            _say(f"{'warm' if warm else 'cold'}: {RUNS} runs each, isolated and plain")
            out["warm" if warm else "cold"] = await _starts(root, warm)
        _say("bwrap alone")
        out["bwrap"] = _bwrap_alone(root)
        out["target_ms"] = 20
        out["load_average_at_start"] = load
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run()), indent=2))
