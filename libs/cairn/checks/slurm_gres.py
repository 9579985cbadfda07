"""slurm-gres: Slurm has gres/gpu configured, and a job inside an allocation got its GPUs.

Sums `gpu` GRES over `sinfo -N` nodes; when this check itself runs in a Slurm job with GPUs
requested, `CUDA_VISIBLE_DEVICES` must name them. No Slurm configured here (or no `sinfo`):
skipped with that reason.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cairn.checks.report import CheckReport
from cairn.snapshot.collect import SLURM_CONF_PATHS
from cairn.snapshot.collectors.collected import ToolAbsent
from cairn.snapshot.collectors.command import CommandFailed, run_command
from cairn.snapshot.collectors.slurm import gres_gpus

NAME = "slurm-gres"


def gres_by_node(text: str) -> dict[str, int]:
    """`sinfo -h -N -o '%N %G'` -> node -> GPUs (a node listed per partition counts once)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            out[parts[0]] = gres_gpus(parts[1].strip())
    return out


def _configured() -> bool:
    # Client tools without a configuration (pulled in as a dependency) are not a Slurm site.
    return bool(os.environ.get("SLURM_CONF")) or any(Path(p).exists() for p in SLURM_CONF_PATHS)


def run(params: Mapping[str, Any]) -> CheckReport:
    if not _configured():
        return CheckReport(check=NAME, status="skipped",
                           message="no Slurm here (no slurm.conf, no $SLURM_CONF)")
    try:
        text = run_command(["sinfo", "-h", "-N", "-o", "%N %G"], timeout=30)
    except ToolAbsent:
        return CheckReport(check=NAME, status="skipped", message="no Slurm here (sinfo absent)")
    except (CommandFailed, subprocess.TimeoutExpired) as exc:
        return CheckReport(check=NAME, status="failed", message=f"sinfo: {exc}")
    per_node = gres_by_node(text)
    total = sum(per_node.values())
    readings: dict[str, int | float | str | bool] = {"slurm-gres-gpus": total}
    if total == 0:
        return CheckReport(check=NAME, status="failed", readings=readings,
                           details={"nodes": per_node},
                           message="no node has gres/gpu: set GresTypes=gpu and gres.conf")
    if os.environ.get("SLURM_JOB_ID") and os.environ.get("CUDA_VISIBLE_DEVICES", "") == "" \
            and (os.environ.get("SLURM_GPUS") or os.environ.get("SLURM_JOB_GPUS")):
        return CheckReport(check=NAME, status="failed", readings=readings,
                           message="this Slurm job asked for GPUs but CUDA_VISIBLE_DEVICES is "
                                   "empty: check gres.conf and the cgroup plugin")
    return CheckReport(check=NAME, status="passed", readings=readings, details={"nodes": per_node},
                       message=f"{total} GPUs as gres/gpu on "
                               f"{sum(1 for v in per_node.values() if v)} nodes")
