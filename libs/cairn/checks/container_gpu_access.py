"""container-gpu-access: a container started through Docker sees the GPUs.

Docker must have the `nvidia` runtime registered (NVIDIA Container Toolkit); then
`docker run --rm --gpus all IMAGE nvidia-smi -L` must list at least the expected GPUs. No
Docker CLI here: skipped with that reason.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from typing import Any

from cairn.checks.report import CheckReport, option
from cairn.snapshot.collectors.collected import ToolAbsent
from cairn.snapshot.collectors.command import CommandFailed, run_command

NAME = "container-gpu-access"
IMAGE = "ubuntu:24.04"
"""Any image works: the toolkit injects nvidia-smi and the driver libraries."""


def count_gpus(listing: str) -> int:
    """GPUs in `nvidia-smi -L` output (`GPU 0: NVIDIA H100 ... (UUID: GPU-...)`)."""
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def run(params: Mapping[str, Any]) -> CheckReport:
    p = dict(params)
    try:
        runtimes = json.loads(run_command(["docker", "info", "--format", "{{json .Runtimes}}"],
                                          timeout=15) or "{}")
    except ToolAbsent:
        return CheckReport(check=NAME, status="skipped", message="docker is not installed here")
    except (CommandFailed, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        return CheckReport(check=NAME, status="failed", message=f"docker info: {exc}")
    if "nvidia" not in (runtimes or {}):
        return CheckReport(check=NAME, status="failed",
                           message="Docker has no nvidia runtime: install the NVIDIA Container "
                                   "Toolkit and run `nvidia-ctk runtime configure`")
    image = str(option(p, "image", IMAGE))
    timeout = float(option(p, "timeout_s", 240))
    try:
        listing = run_command(["docker", "run", "--rm", "--gpus", "all", image, "nvidia-smi",
                               "-L"], timeout=timeout)
    except (CommandFailed, subprocess.TimeoutExpired) as exc:
        return CheckReport(check=NAME, status="failed", message=f"docker run --gpus all: {exc}")
    seen = count_gpus(listing)
    expected = int(option(p, "expected_gpus", 1))
    readings: dict[str, int | float | str | bool] = {"container-gpu-count": seen}
    if seen < max(1, expected):
        return CheckReport(check=NAME, status="failed", readings=readings,
                           message=f"the container sees {seen} GPUs, expected {expected}")
    return CheckReport(check=NAME, status="passed", readings=readings,
                       message=f"the container sees {seen} GPUs ({image})")
