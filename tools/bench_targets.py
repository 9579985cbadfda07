"""The figures of `make bench` that have a target, each with its value, its target, whether
it is met, and NVIDIA FLARE 2.9's figure where there is one to compare: `tools/bench.py`
adds this block (`targets`) after its sections, from those that ran.

FLARE's figures come from `tools/flare_poc.py`'s JSON when `CAIRN_BENCH_FLARE` names that
file (measured on this machine; its medians), else from the ones published with the issue
that set these targets (measured then on a machine like this one), labelled as such.
"""

from __future__ import annotations

import json
import os
from typing import Any

FLARE_PUBLISHED = {"start_s": 9.07, "job_3_rounds_s": 14.6, "first_line_s": 1.68,
                   "idle_client_parent_pss_mib": 61.2}

# name -> (section, path to the value, target, "<" or ">=" , FLARE figure key or None)
FIGURES: dict[str, tuple[str, tuple[str, ...], float, str, str | None]] = {
    "up_to_healthy_from_command_start_s": (
        "perf", ("start", "reused_dir", "from_command_start_s", "median"), 0.4, "<", "start_s"),
    "up_check_command_wall_s": (
        "perf", ("start", "reused_dir", "command_wall_s", "median"), 1.0, "<", None),
    "first_fedavg_submit_to_completed_s": (
        "perf", ("first_job", "first_fedavg", "submit_to_completed_s"), 0.5, "<",
        "job_3_rounds_s"),
    "warm_fedavg_submit_to_completed_s": (
        "perf", ("first_job", "warm_fedavg_submit_to_completed_s", "median"), 0.3, "<", None),
    "submit_to_first_line_s": (
        "perf", ("first_job", "probe_worker", "first_line_s", "median"), 0.15, "<",
        "first_line_s"),
    "idle_site_pss_mib_parent_plus_warm_interpreter": (
        "perf", ("first_job", "idle_memory", "per_site_max_pss_mib"), 40.0, "<",
        "idle_client_parent_pss_mib"),
    "round_overhead_ms": (
        "perf", ("first_job", "round_overhead_ms_median"), 1.5, "<", None),
    "bus_publish_ratio_to_raw_nats_py": (
        "bus", ("publish", "ratio_untraced"), 0.95, ">=", None),
    "bus_hop_p50_ms": ("bus", ("hop", "p50_ms"), 0.35, "<", None),
    "bus_replay_ratio": ("bus", ("replay", "ratio"), 0.9, ">=", None),
    "secure_acked_publish_ratio_to_plain": (
        "security", ("js_publish_acked_ratio",), 0.9, ">=", None),
}


def _dig(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def flare_figures() -> tuple[dict[str, Any], str]:
    path = os.environ.get("CAIRN_BENCH_FLARE")
    if path:
        with open(path) as f:
            measured = json.load(f)
        medians = {k: v["median"] for k, v in measured.items()
                   if isinstance(v, dict) and "median" in v}
        return medians, f"measured on this machine by tools/flare_poc.py ({path})"
    return dict(FLARE_PUBLISHED), ("published with the issue that set these targets "
                                   "(CAIRN_BENCH_FLARE=<tools/flare_poc.py output> measures "
                                   "them here)")


def _met(value: float, op: str, target: float) -> bool:
    return value < target if op == "<" else value >= target


def targets(doc: dict[str, Any]) -> dict[str, Any]:
    """The `targets` block for a `make bench` document."""
    flare, source = flare_figures()
    out: dict[str, Any] = {}
    for name, (section, path, target, op, flare_key) in FIGURES.items():
        value = _dig(doc.get(section), path)
        if not isinstance(value, int | float):
            continue
        row: dict[str, Any] = {"value": value, "target": f"{op} {target:g}",
                               "met": _met(float(value), op, target)}
        if flare_key is not None and flare.get(flare_key) is not None:
            row["flare_2_9_poc"] = flare[flare_key]
        out[name] = row
    return {"figures": out, "flare_2_9_poc_source": source,
            "all_met": all(r["met"] for r in out.values()) if out else None}
