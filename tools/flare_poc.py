"""NVIDIA FLARE's POC mode measured the way `tools/bench_perf.py` measures Cairn, on this machine.

Run it with a Python that has `nvflare` installed (its own venv: it is never a dependency of
Cairn), not the project's:

    python3 -m venv .flare-venv && .flare-venv/bin/pip install 'nvflare==2.9.*'
    .flare-venv/bin/python tools/flare_poc.py [--runs 3] > flare.json

It prepares a 2-client POC workspace in a temporary folder and, per run:

- start: `nvflare poc start` (server and 2 clients; the command waits until they are ready),
  from the command's start to its return;
- first job: a 3-round NumPy FedAvg (the `fedavg-numpy` recipe, its client script run as an
  external process, as a Cairn worker is), submit -> FINISHED, through one admin session
  (`flare_api`) opened beforehand; then two more, warm;
- first line: submit -> the client script's first statement (it writes `time.time()`);
- idle memory: PSS / RSS of each client parent (`client_train`) after the jobs, idle;
- stop: `nvflare poc stop`.

It prints one JSON document: the median and minimum of each figure over the runs. It imports
nothing of Cairn and Cairn imports nothing of it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ADMIN = "admin@nvidia.com"
CLIENT_SCRIPT = """\
import os, time
T0 = time.time()
open(f"first_line_{os.getpid()}", "w").write(repr(T0))
import numpy as np
import nvflare.client as flare
flare.init()
while flare.is_running():
    model = flare.receive()
    params = {k: np.asarray(v) + 1.0 for k, v in model.params.items()}
    flare.send(flare.FLModel(params=params, metrics={"accuracy": 0.5}))
"""


def _say(message: str) -> None:
    print(f"[flare poc] {message}", file=sys.stderr, flush=True)


def _nvflare(env: dict[str, str], *args: str, timeout: float = 300) -> float:
    """Run `nvflare ARGS`; its wall seconds."""
    exe = str(Path(sys.executable).parent / "nvflare")
    t0 = time.monotonic()
    subprocess.run([exe, *args], env=env, check=True, timeout=timeout,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return time.monotonic() - t0


def _export_job(dest: Path) -> Path:
    from nvflare.app_common.np.recipes.fedavg import NumpyFedAvgRecipe

    (dest / "src").mkdir(parents=True, exist_ok=True)
    script = dest / "src" / "client.py"
    script.write_text(CLIENT_SCRIPT)
    cwd = os.getcwd()
    os.chdir(dest / "src")
    try:
        recipe = NumpyFedAvgRecipe(name="bench-fedavg", model=[[1.0, 2.0], [3.0, 4.0]],
                                   min_clients=2, num_rounds=3, train_script="client.py",
                                   launch_external_process=True)
        recipe.export(str(dest / "job"))
    finally:
        os.chdir(cwd)
    return dest / "job" / "bench-fedavg"


def _pss_rss_mib(pid: int) -> tuple[float, float]:
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0] in ("Pss:", "Rss:"):
                fields[parts[0]] = int(parts[1])
    return fields["Pss:"] / 1024, fields["Rss:"] / 1024


def _client_parents(workspace: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"client_train" in cmd and str(workspace).encode() in cmd:
            found.append(int(entry.name))
    return found


def _run_job(session: Any, job: Path, prod: Path) -> tuple[float, float]:
    """(submit -> finished, submit -> first line) of one job, seconds."""
    t0 = time.time()
    job_id = session.submit_job(str(job))
    deadline = time.monotonic() + 300
    while True:
        status = str(session.get_job_meta(job_id).get("status", ""))
        if status.startswith("FINISHED"):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} not finished after 300 s: {status}")
        time.sleep(0.1)
    took = time.time() - t0
    if status != "FINISHED:COMPLETED":
        raise RuntimeError(f"job {job_id} ended {status}")
    marks = list(prod.glob(f"*/{job_id}/*/first_line_*"))
    first = min(float(m.read_text()) for m in marks) - t0 if marks else float("nan")
    return took, first


def one_run(root: Path) -> dict[str, Any]:
    from nvflare.fuel.flare_api.flare_api import new_secure_session

    workspace = root / "poc"
    env = {**os.environ, "NVFLARE_POC_WORKSPACE": str(workspace),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    _nvflare(env, "poc", "prepare", "-n", "2", "--force")
    prod = workspace / "example_project" / "prod_00"
    job = _export_job(root / "job")
    try:
        start = _nvflare(env, "poc", "start", "--timeout", "120", timeout=180)
        _say(f"poc start returned in {start:.2f}s")
        # FLARE's API prints progress on stdout, which is this tool's JSON.
        with contextlib.redirect_stdout(sys.stderr):
            session = new_secure_session(ADMIN, str(prod / ADMIN), timeout=60)
            try:
                jobs = [_run_job(session, job, prod) for _ in range(3)]
            finally:
                session.close()
        _say(f"jobs: {[round(j[0], 2) for j in jobs]}")
        time.sleep(2.0)  # idle
        memory = [_pss_rss_mib(pid) for pid in _client_parents(workspace)]
    finally:
        _nvflare(env, "poc", "stop", timeout=120)
    return {"start_s": start, "job_3_rounds_s": jobs[0][0],
            "job_3_rounds_warm_s": statistics.median(j[0] for j in jobs[1:]),
            "first_line_s": jobs[0][1],
            "idle_client_parent_pss_mib": max(m[0] for m in memory) if memory else None,
            "idle_client_parent_rss_mib": max(m[1] for m in memory) if memory else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    import nvflare

    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="flare-poc-") as tmp:
            _say(f"run {i + 1}/{args.runs}")
            runs.append(one_run(Path(tmp)))
    keys = runs[0].keys()
    doc: dict[str, Any] = {"nvflare": nvflare.__version__, "runs": len(runs),
                           "load_avg": os.getloadavg()}
    for key in keys:
        values = [r[key] for r in runs if r[key] is not None]
        doc[key] = {"median": round(statistics.median(values), 3),
                    "min": round(min(values), 3)} if values else None
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
