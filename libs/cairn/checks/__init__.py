"""Cairn's recipe checks: one module per check, each run as an ordinary job.

    python -m cairn.checks cpu-smoke [--params JSON]     # params default to $CAIRN_PARAMS

A check prints one `CAIRN-CHECK {json}` line (see `cairn.checks.report`) and exits 0 when it
passed or was skipped, 1 when it failed, 2 when it broke. The validator submits checks to the
reserved study `validation`, reads the line back from the launcher's log, and combines the
ranks of a multi-rank check with `combine`.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cairn.checks.report import MARKER, CheckReport, Status, format_line, option, parse_lines

MODULES: dict[str, str] = {
    "accelerator-discovery": "cairn.checks.accelerator_discovery",
    "container-gpu-access": "cairn.checks.container_gpu_access",
    "cpu-smoke": "cairn.checks.cpu_smoke",
    "gang-start": "cairn.checks.gang_start",
    "gpu-matmul": "cairn.checks.gpu_matmul",
    "k8s-device-plugin": "cairn.checks.k8s_device_plugin",
    "nccl-all-reduce-bw": "cairn.checks.nccl_all_reduce_bw",
    "slurm-gres": "cairn.checks.slurm_gres",
}
"""Every check Cairn implements; recipes/checks.yaml must name no other."""

_SEVERITY: dict[str, int] = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}

RunCheck = Callable[[Mapping[str, Any]], CheckReport]


def run_check(name: str, params: Mapping[str, Any], *, rank: int = 0,
              started_at: float | None = None) -> CheckReport:
    """Run one check here and now; never raises (a broken check reports `error`)."""
    import msgspec

    started = time.time() if started_at is None else started_at
    t0 = time.monotonic()
    module_name = MODULES.get(name)
    if module_name is None:
        report = CheckReport(check=name, status="error",
                             message=f"unknown check; known: {', '.join(MODULES)}")
    else:
        func: RunCheck = importlib.import_module(module_name).run
        try:
            report = func(params)
        except Exception as exc:  # a check's bug must come back as a result, not a silence
            report = CheckReport(check=name, status="error",
                                 message=f"{type(exc).__name__}: {exc}")
    return msgspec.structs.replace(report, check=name, rank=rank, started_at=started,
                                   duration_s=round(time.monotonic() - t0, 6))


def combine(name: str, reports: Sequence[CheckReport], params: Mapping[str, Any]) -> CheckReport:
    """One result from every rank's report: the check's own `combine` where it has one
    (gang-start compares start times), else the worst status.

    Args:
        reports: what the ranks printed (fewer than expected: the missing ranks count as
            errors, since a rank that said nothing proves nothing).
    """
    expected = int(params.get("ranks", 1) or 1)
    module_name = MODULES.get(name)
    if module_name is not None:
        own = getattr(importlib.import_module(module_name), "combine", None)
        if own is not None:
            result: CheckReport = own(list(reports), params)
            return result
    if not reports:
        return CheckReport(check=name, status="error", message="the check printed no result")
    worst = max(reports, key=lambda r: _SEVERITY[r.status])
    if len(reports) < expected:
        return CheckReport(check=name, status="error", readings=dict(worst.readings),
                           message=f"{len(reports)} of {expected} ranks reported")
    return worst


__all__ = ["MARKER", "MODULES", "CheckReport", "Status", "combine", "format_line", "option",
           "parse_lines", "run_check"]
