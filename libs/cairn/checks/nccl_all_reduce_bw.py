"""nccl-all-reduce-bw: NCCL bus bandwidth from nccl-tests' `all_reduce_perf`.

Needs `all_reduce_perf` on the worker's PATH (skipped with that reason otherwise). The reading
is the peak bus bandwidth over the message sweep (the figure NCCL tuning guides compare);
the average nccl-tests prints is kept in the details.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from cairn.checks.report import CheckReport, option

NAME = "nccl-all-reduce-bw"
TOOL = "all_reduce_perf"


def parse_output(text: str) -> dict[str, Any]:
    """Peak and average bus bandwidth (GB/s), the row count and wrong results.

    Columns are found from the header line, so versions with and without the `root` column
    both parse.
    """
    busbw_cols: list[int] = []
    wrong_cols: list[int] = []
    peak = 0.0
    rows = 0
    wrong = 0
    average: float | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            tokens = stripped.lstrip("#").split()
            if "busbw" in tokens and "size" in tokens:
                busbw_cols = [i for i, t in enumerate(tokens) if t == "busbw"]
                wrong_cols = [i for i, t in enumerate(tokens) if t == "#wrong"]
            if stripped.startswith("# Avg bus bandwidth"):
                average = float(stripped.rsplit(":", 1)[1])
            continue
        tokens = stripped.split()
        if not busbw_cols or not tokens or not tokens[0].isdigit():
            continue
        try:
            values = [float(tokens[i]) for i in busbw_cols if i < len(tokens)]
        except ValueError:
            continue
        rows += 1
        peak = max([peak, *values])
        wrong += sum(int(tokens[i]) for i in wrong_cols
                     if i < len(tokens) and tokens[i].isdigit())
    return {"peak_busbw": peak, "avg_busbw": average, "rows": rows, "wrong": wrong}


def _gpus() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return 1
    return len([v for v in visible.split(",") if v.strip()])


def run(params: Mapping[str, Any]) -> CheckReport:
    p = dict(params)
    tool = shutil.which(TOOL)
    if tool is None:
        return CheckReport(check=NAME, status="skipped",
                           message=f"{TOOL} (nccl-tests) is not on the worker's PATH")
    gpus = _gpus()
    if gpus == 0:
        return CheckReport(check=NAME, status="skipped", message="the job was given no GPU")
    argv = [tool, "-b", str(option(p, "min_bytes", "1K")), "-e", str(option(p, "max_bytes", "16G")),
            "-f", "2", "-g", str(gpus)]
    timeout = float(option(p, "timeout_s", 1800))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return CheckReport(check=NAME, status="failed", message=f"{TOOL} ran past {timeout:g}s")
    parsed = parse_output(proc.stdout)
    details = {**parsed, "argv": argv, "exit_code": proc.returncode}
    if proc.returncode != 0 or parsed["rows"] == 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return CheckReport(check=NAME, status="failed", details=details,
                           message=f"{TOOL} exited {proc.returncode}: {tail[0]}")
    if parsed["wrong"]:
        return CheckReport(check=NAME, status="failed", details=details,
                           readings={NAME: parsed["peak_busbw"]},
                           message=f"{parsed['wrong']} wrong results in the sweep")
    return CheckReport(check=NAME, status="passed", readings={NAME: parsed["peak_busbw"]},
                       details=details,
                       message=f"peak bus bandwidth {parsed['peak_busbw']} GB/s on {gpus} GPUs")
