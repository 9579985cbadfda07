"""`cairn sim` at 100 sites, and a FLARE trainer on Cairn next to FLARE's own simulator.

- sim_100: `cairn sim examples/fedavg/job.yaml --sites 100` (secure, 50 sites to a
  process, the example's data written by its setup script): federation start, submit ->
  completed, the server's wall time per round, and the peak memory of everything the
  simulation ran (PSS summed over every process: nats-server, parents, warm interpreters,
  workers; and RSS), sampled every second.
- flare_hello_numpy: the FedAvg job of tests/data/flare/jobs/hello-numpy-diff (exported
  with FLARE's Job API; its trainer is examples/flare-numpy/app/client.py, a Client API
  trainer in FLARE's hello-numpy style, here sending DIFF updates weighed 1 and 3), 2 sites,
  3 rounds, run twice in this run on this machine:
  by `nvflare simulator -n 2 -t 2` (PyPI nvflare in its own venv, tools/flare_venv.py)
  and, converted by `cairn job import-flare`, by `cairn sim --sites 2`. Whole command wall
  time each, and the interval between rounds (FLARE: the trainers' first line of each
  round in its log; Cairn: the server's wall time per round). `same_trainer_lines`: whether
  the trainers printed the same lines (the model each received, every round) on both.

`run()` returns the section for `tools/bench.py`; progress goes to stderr.
"""

from __future__ import annotations

import itertools
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from cairn.runtime.sim import SimReport, simulate

REPO = Path(__file__).resolve().parents[1]
FEDAVG = REPO / "examples" / "fedavg"
FLARE_JOB = REPO / "tests" / "data" / "flare" / "jobs" / "hello-numpy-diff"
# What the trainer prints each round: the model it received, plus its step (rounded to 3).
TRAINER_LINE = re.compile(r"(site-\d+: round \d+ of \d+: \w+ update, mean [\d.]+)")
ROUND_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*site-\d+: round (\d+) of")
MIB = 1024 * 1024


def _say(message: str) -> None:
    print(f"[bench sim] {message}", file=sys.stderr, flush=True)


def _summary(report: SimReport, wall_s: float) -> dict[str, Any]:
    return {"state": report.state, "sites": report.sites, "wall_s": round(wall_s, 2),
            "start_s": report.start_s, "job_s": report.job_s, "round_s": report.round_s,
            "round_s_median": round(statistics.median(report.round_s), 3)
            if report.round_s else None,
            "peak_pss_mib": round(report.peak_pss_bytes / MIB),
            "peak_rss_mib": round(report.peak_rss_bytes / MIB),
            "peak_processes": report.peak_processes}


def sim_100(base: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    report = simulate(FEDAVG / "job.yaml", 100, base / "sim100", say=lambda _: None,
                      setup=f"{sys.executable} {FEDAVG / 'setup_data.py'} "
                            "--sites-dir {sites_dir}")
    out = _summary(report, time.monotonic() - t0)
    server = report.results.get("server@hub") or {}
    out["sites_per_round"] = [len(r["sites"]) for r in server.get("rounds", [])]
    out["accuracy"] = [round(a, 4) for a in server.get("accuracy", [])]
    return out


def _flare_rounds(log: str) -> list[float]:
    first: dict[int, datetime] = {}
    for line in log.splitlines():
        m = ROUND_LINE.match(line)
        if m:
            first.setdefault(int(m[2]), datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f"))
    times = [first[k] for k in sorted(first)]
    return [round((b - a).total_seconds(), 3) for a, b in itertools.pairwise(times)]


def flare_hello_numpy(base: Path) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "tools"))
    import flare_venv

    result: dict[str, Any] = {}
    flare_lines: list[str] = []
    python = flare_venv.python()
    if python is None:
        result["nvflare_simulator"] = {"skipped": "no nvflare venv (python tools/flare_venv.py)"}
    else:
        nvflare = python.parent / "nvflare"
        t0 = time.monotonic()
        done = subprocess.run([str(nvflare), "simulator", str(FLARE_JOB), "-w",
                               str(base / "flare-ws"), "-n", "2", "-t", "2"],
                              capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - t0
        rounds = _flare_rounds(done.stdout + done.stderr)
        flare_lines = sorted(set(TRAINER_LINE.findall(done.stdout + done.stderr)))
        result["nvflare_simulator"] = {
            "nvflare": flare_venv.NVFLARE_VERSION, "exit_code": done.returncode,
            "wall_s": round(wall, 2), "round_interval_s": rounds,
            "round_interval_s_median": round(statistics.median(rounds), 3) if rounds else None}
        _say(f"FLARE simulator: {wall:.1f}s")
    convert = subprocess.run([sys.executable, "-m", "cairn.cli.main", "job", "import-flare",
                              str(FLARE_JOB), "--out", str(base / "converted")],
                             capture_output=True, text=True, timeout=120)
    if convert.returncode != 0:
        raise RuntimeError(f"import-flare failed: {convert.stderr}")
    t0 = time.monotonic()
    report = simulate(base / "converted" / "job.yaml", 2, base / "sim2", say=lambda _: None)
    result["cairn_sim"] = _summary(report, time.monotonic() - t0)
    logs = "".join(p.read_text(errors="replace")
                   for p in (base / "sim2" / "sites").glob("*/work/**/*.log"))
    cairn_lines = sorted(set(TRAINER_LINE.findall(logs)))
    _say(f"cairn sim: {result['cairn_sim']['wall_s']}s")
    flare = result["nvflare_simulator"]
    if "wall_s" in flare:
        result["same_trainer_lines"] = bool(cairn_lines) and cairn_lines == flare_lines
        result["trainer_lines"] = cairn_lines
        result["flare_over_cairn_wall"] = round(flare["wall_s"] / result["cairn_sim"]["wall_s"],
                                                1)
    return result


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-sim-") as tmp:
        base = Path(tmp)
        _say("cairn sim, 100 sites, FedAvg 3 rounds")
        hundred = sim_100(base)
        _say(f"100 sites: {hundred['wall_s']}s, peak {hundred['peak_pss_mib']} MiB PSS")
        return {"sim_100": hundred, "flare_hello_numpy": flare_hello_numpy(base)}


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
