"""gang-start: every rank of a multi-rank job starts within a window of the others.

Each rank only reports when its process started (`started_at`, taken first thing in
`python -m cairn.checks`); `combine` does the judging once all ranks are in. On the process
backend the ranks are N workers of one job on the one machine (roles `rank-0..N-1`); the
coordinator places a job's workers all together or not at all, so "none" is the other half.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cairn.checks.report import CheckReport, option

NAME = "gang-start"
WINDOW_S = 30.0


def run(params: Mapping[str, Any]) -> CheckReport:
    return CheckReport(check=NAME, status="passed", message="rank started")


def combine(reports: Sequence[CheckReport], params: Mapping[str, Any]) -> CheckReport:
    p = dict(params)
    ranks = int(p.get("ranks", 1) or 1)
    window = float(option(p, "window_s", WINDOW_S))
    started = sorted((r.rank, r.started_at) for r in reports if r.started_at > 0)
    seen = sorted({rank for rank, _ in started})
    details: dict[str, Any] = {"ranks": ranks, "window_s": window,
                               "started_at": {str(rank): t for rank, t in started}}
    if len(seen) < ranks:
        missing = sorted(set(range(ranks)) - set(seen))
        return CheckReport(check=NAME, status="failed", details=details,
                           message=f"{len(seen)} of {ranks} ranks started (missing: "
                                   f"{', '.join(map(str, missing))})")
    times = [t for _, t in started]
    spread = round(max(times) - min(times), 3)
    details["spread_s"] = spread
    readings: dict[str, int | float | str | bool] = {"gang-start-seconds": spread}
    if spread > window:
        return CheckReport(check=NAME, status="failed", readings=readings, details=details,
                           message=f"ranks started {spread}s apart, over the {window:g}s window")
    return CheckReport(check=NAME, status="passed", readings=readings, details=details,
                       message=f"{ranks} ranks started within {spread}s (window {window:g}s)")
