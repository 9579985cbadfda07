"""Benchmark: submit -> worker running on Slurm through Cairn, next to plain `sbatch`, in one run.

Both start the same one-line worker on the same private two-node cluster (the test lab of
tests/fixtures/slurm_lab.py; needs root and slurm-wlm, slurmrestd): the worker's first act is to
write the time, so "running" means the worker's own command ran, for both. Cairn's path is
`SlurmBackend.launch` (working directory, code copied, batch script, submit) through the CLI
driver and through slurmrestd; the platform's own are `sbatch --parsable` of a script doing the
same, and a bare `POST /slurm/v0.0.38/job/submit` of it. Each Cairn path is compared with its
own platform path.
Runs alternate so that load on the machine falls on both alike.

`make bench` (tools/bench.py) calls `run()`; run alone with `python tools/bench_slurm.py`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RUNS = 7
WAIT_S = 60.0


def run() -> dict[str, Any]:
    """Median seconds from submit to the worker running: sbatch alone, Cairn (cli, rest)."""
    tools = ("munged", "slurmctld", "slurmd", "slurmrestd", "sbatch")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing or os.geteuid() != 0:
        return {"skipped": f"needs root and {', '.join(missing) or 'Slurm'}: apt-get install "
                           "slurm-wlm slurmrestd slurm-wlm-jwt-plugin"}
    repo = Path(__file__).resolve().parent.parent
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    from tests.fixtures.slurm_lab import make_lab, start_lab, stop_lab

    root = Path(tempfile.mkdtemp(prefix="cairn-bench-slurm-"))
    root.chmod(0o755)
    lab = make_lab(root, accounting=False)
    try:
        start_lab(lab)
        return asyncio.run(_measure(lab, root))
    finally:
        stop_lab(lab)
        shutil.rmtree(root, ignore_errors=True)


async def _measure(lab: Any, root: Path) -> dict[str, Any]:
    from cairn.launcher.backends import LaunchSpec, make_launch_id
    from cairn.launcher.backends.slurm import RestDriver, SlurmBackend

    code = root / "code"
    code.mkdir()
    (code / "app.py").write_text("# the bundle\n")
    backends = {
        "cli": SlurmBackend(root / "cli", driver="cli", env=lab.env, poll_s=0.5),
        "rest": SlurmBackend(root / "rest", driver="rest", url=f"unix:{lab.rest_socket}",
                             user="root", jwt_key=str(lab.jwt_key), poll_s=0.5),
    }
    rest = backends["rest"].driver
    assert isinstance(rest, RestDriver)
    times: dict[str, list[float]] = {"sbatch": [], "post": [], "cli": [], "rest": []}
    try:
        for index in range(RUNS + 1):  # the first round warms caches and is not counted
            for kind in ("sbatch", "post", "cli", "rest"):
                marker = root / f"{kind}-{index}.started"
                command = f"date +%s.%N > {marker}"
                started = time.time()
                if kind == "sbatch":
                    script = root / f"plain-{index}.sh"
                    script.write_text(f"#!/bin/bash\n{command}\n")
                    await asyncio.to_thread(
                        subprocess.run, ["sbatch", "--parsable", "--output=/dev/null",
                                         f"--chdir={root}", str(script)],
                        env=lab.env, check=True, capture_output=True, timeout=30)
                elif kind == "post":
                    # slurmrestd's own submit, with nothing of Cairn's around it.
                    status, _ = await rest._call("POST", "/slurm/v0.0.38/job/submit", {
                        "script": f"#!/bin/bash\n{command}\n",
                        "job": {"current_working_directory": str(root),
                                "standard_output": "/dev/null",
                                "environment": {"PATH": "/usr/bin:/bin"}}})
                    assert status == 200, status
                else:
                    await backends[kind].launch(LaunchSpec(
                        launch_id=make_launch_id(f"b{index}", "site-a", "client", 0, 0),
                        job=f"b{index}", study="bench", site="site-a", role="client",
                        entrypoint=["bash", "-c", command], code_dir=str(code),
                        memory_bytes=100 * 2**20, millicpus=1000))
                ran = await _when_written(marker)
                if index:
                    times[kind].append(ran - started)
    finally:
        for backend in backends.values():
            await backend.close()
    medians = {kind: statistics.median(values) for kind, values in times.items()}
    return {
        "slurm.sbatch_to_running.median_s": round(medians["sbatch"], 4),
        "slurm.cairn_cli_to_running.median_s": round(medians["cli"], 4),
        "slurm.cairn_rest_to_running.median_s": round(medians["rest"], 4),
        "slurm.cairn_cli_overhead_s": round(medians["cli"] - medians["sbatch"], 4),
        "slurm.rest_post_to_running.median_s": round(medians["post"], 4),
        "slurm.cairn_rest_overhead_s": round(medians["rest"] - medians["post"], 4),
        "slurm.runs": RUNS,
        "slurm.target_overhead_s": 0.1,
    }


async def _when_written(marker: Path) -> float:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            text = marker.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text:
            return float(text)
        await asyncio.sleep(0.01)
    raise TimeoutError(f"{marker.name}: the worker did not start in {WAIT_S:g} s")


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
