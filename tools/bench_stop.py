"""Benchmark: how fast the process backend stops a worker (median of 5 each, cold starts).

- cancel: `cancel()` of a worker that exits on SIGTERM, until it is gone (the tests only prove
  that SIGTERM reached it);
- timeout overshoot: how far past its `timeout_s` a sleeping worker is reported ended.

`make bench` (tools/bench.py) calls `run()`; run alone with `python tools/bench_stop.py`.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

RUNS = 5
TIMEOUT_S = 0.5


async def _measure(root: Path) -> dict[str, float]:
    from cairn.launcher.backends import LaunchSpec, make_launch_id
    from cairn.launcher.backends.process import ProcessBackend

    code = root / "code"
    code.mkdir()
    backend = ProcessBackend(root / "site", grace_s=30.0, warm=False)

    def spec(rank: int, source: str, timeout_s: float | None = None) -> LaunchSpec:
        return LaunchSpec(launch_id=make_launch_id("bench", "site-a", "client", rank, 0),
                          job="bench", study="bench", site="site-a", role="client", rank=rank,
                          entrypoint=["python", "-c", source], code_dir=str(code),
                          timeout_s=timeout_s)

    cancels, overshoots = [], []
    try:
        for i in range(RUNS):
            handle = await backend.launch(spec(i, "import time; time.sleep(600)"))
            await asyncio.sleep(0.3)  # let it reach its sleep
            started = time.perf_counter()
            async with asyncio.timeout(60):
                await backend.cancel(handle, grace_s=30.0)
                await backend.wait(handle)
            cancels.append(time.perf_counter() - started)
        for i in range(RUNS):
            started = time.perf_counter()
            async with asyncio.timeout(60):
                handle = await backend.launch(spec(100 + i, "import time; time.sleep(600)",
                                                   timeout_s=TIMEOUT_S))
                await backend.wait(handle)
            overshoots.append(time.perf_counter() - started - TIMEOUT_S)
    finally:
        await backend.close()
    return {
        "stop.process.cancel_median_s": round(statistics.median(cancels), 4),
        "stop.process.cancel_max_s": round(max(cancels), 4),
        "stop.process.timeout_overshoot_median_s": round(statistics.median(overshoots), 4),
        "stop.process.timeout_overshoot_max_s": round(max(overshoots), 4),
    }


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-stop-") as tmp:
        return asyncio.run(_measure(Path(tmp)))


if __name__ == "__main__":
    for name, value in run().items():
        print(f"{name}: {value}")
