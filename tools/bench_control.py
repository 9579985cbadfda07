"""Control-plane benchmarks: `cairn up` to healthy, idle site parent RSS, submit -> worker's
first line of code running. Run through `make bench` (tools/bench.py)."""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from cairn.client import Client
from cairn.runtime.context import Context
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation

FIRST_LINE = """\
import time, os, pathlib
pathlib.Path(os.environ["CAIRN_WORKDIR"], "first-line").write_text(repr(time.time()))
"""


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def zygotes_of(parent: int) -> list[int]:
    """The warm interpreters (launcher zygotes) a site parent started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"_zygote" in cmdline:
            found.append(int(entry.name))
    return found


async def measure(samples: int = 8) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        fed = EmbeddedFederation(dir=Path(tmp) / "fed", heartbeat_s=0.5)
        t0 = time.monotonic()
        fed.start()
        try:
            await fed.wait_healthy(60)
            up = time.monotonic() - t0
            await asyncio.sleep(2.0)  # idle
            sites = [p.proc.pid for p in fed.processes if p.name.startswith("site-")]
            site_rss = [rss_mib(pid) for pid in sites]
            zygote_rss = [rss_mib(z) for pid in sites for z in zygotes_of(pid)]
            coord_rss = rss_mib(fed.process("coordinator").proc.pid)
            assert fed.nats is not None
            client = await Client.connect(Context(nats_url=fed.nats.url, study="demo",
                                                  actor=DEFAULT_ADMIN, **fed.client_options()))
            job_dir = Path(tmp) / "job"
            (job_dir / "app").mkdir(parents=True)
            (job_dir / "app" / "main.py").write_text(FIRST_LINE)
            (job_dir / "job.yaml").write_text(textwrap.dedent("""\
                name: first-line
                code: ./app
                roles:
                  client:
                    entrypoint: python main.py
                    resources: {cpus: 1, memory: 256Mi}
                    sites: [site-a]
                """))
            latencies = []
            for _ in range(samples):
                start = time.time()
                job = await client.submit(job_dir / "job.yaml")
                await client.wait(job, timeout=30, poll=0.05)
                marks = list((fed.site_dir("site-a") / "work" / "workers").glob(
                    f"{job}*/first-line"))
                latencies.append(float(marks[0].read_text()) - start)
            await client.close()
        finally:
            fed.stop()
    return {
        "up_to_healthy_s_spawned": round(up, 3),
        "idle_site_parent_rss_mib": round(max(site_rss), 1),
        "idle_coordinator_rss_mib": round(coord_rss, 1),
        # The warm interpreter each site keeps for Python workers, its own process.
        "idle_site_zygote_rss_mib": round(max(zygote_rss), 1) if zygote_rss else None,
        "submit_to_first_line_s_p50": round(statistics.median(latencies), 4),
        "submit_to_first_line_s_max": round(max(latencies), 4),
        "targets": {"submit_to_first_line_s": 0.15, "idle_site_parent_rss_mib": 60,
                    "flare_2_9_poc": {"submit_to_first_line_s": 0.93,
                                      "idle_client_parent_rss_mib": 85}},
    }


def up_check(runs: int = 3) -> dict[str, float]:
    """`cairn up --check` as a user runs it: its own report of time to healthy."""
    import re
    import subprocess

    healthy, from_start, wall = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "cairn", "up", "--check", "--dir",
                                   str(Path(tmp) / "up")], cwd=tmp, capture_output=True,
                                  text=True, timeout=120, check=True)
            wall.append(time.monotonic() - t0)
        found = re.search(r"in ([\d.]+)s \(([\d.]+)s from start\)", done.stdout)
        assert found, done.stdout
        healthy.append(float(found.group(1)))
        from_start.append(float(found.group(2)))
    return {"up_check_healthy_s_median": statistics.median(healthy),
            "up_check_from_start_s_median": statistics.median(from_start),
            "up_check_command_wall_s_median": round(statistics.median(wall), 3)}


def run() -> dict[str, Any]:
    result = asyncio.run(measure())
    result.update(up_check())
    result["targets"]["up_check_from_start_s"] = 1.0
    return result


if __name__ == "__main__":
    import json

    json.dump(run(), sys.stdout, indent=2)
    print()
