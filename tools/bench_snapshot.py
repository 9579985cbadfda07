"""Benchmark: wall time of `collect_local()` on this machine (median of 5 runs).

`make bench` (tools/bench.py) calls `run()`; run alone with `python tools/bench_snapshot.py`.
"""

from __future__ import annotations

import statistics
import time

RUNS = 5


def run() -> dict[str, float]:
    """Median, min and max seconds of `collect_local()`, plus readings per node."""
    from cairn.snapshot.collect import collect_local

    collect_local()  # warm imports and page cache: the first run measures Python, not us
    times = []
    readings = 0
    for _ in range(RUNS):
        started = time.perf_counter()
        snap = collect_local()
        times.append(time.perf_counter() - started)
        readings = len(snap.readings(snap.nodes[0].node)) if snap.nodes else 0
    return {
        "snapshot.collect_local.median_s": statistics.median(times),
        "snapshot.collect_local.min_s": min(times),
        "snapshot.collect_local.max_s": max(times),
        "snapshot.collect_local.readings": float(readings),
    }


if __name__ == "__main__":
    for name, value in run().items():
        print(f"{name}: {value:.4f}")
