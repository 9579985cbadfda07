"""accelerator-discovery: the GPUs a job actually sees, against what the site should give it.

The validator asks for every GPU the site declares and passes that number as
`expected_gpus`; the check counts GPUs with NVML or nvidia-smi (the snapshot's GPU
collector) and narrows the count to `CUDA_VISIBLE_DEVICES`, which the launcher sets to the
GPUs it granted (empty = none). No driver and no nvidia-smi counts as zero GPUs: that is the
right answer on a CPU-only site, and the recipe's `accelerator-count` constraint decides.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from cairn.checks.report import CheckReport, option


def physical_gpus() -> tuple[int, str]:
    """(GPUs the driver reports, how it was found)."""
    from cairn.snapshot.collectors import gpu

    collected = gpu.collect()
    count = collected.readings.get("GPU.hardware.gpu-count")
    if isinstance(count, int) and not isinstance(count, bool):
        source = collected.readings.get("GPU.hardware.detection-source", "nvml")
        return count, str(source)
    why = "; ".join(e.message for e in collected.errors) or "no GPU reading"
    return 0, f"none ({why})"


def visible(physical: int, cuda_visible: str | None) -> int:
    """GPUs a CUDA program would see: all when the variable is unset, else those it lists
    that exist (indices below `physical`, or UUIDs, which cannot be checked here)."""
    if cuda_visible is None:
        return physical
    count = 0
    for item in (p.strip() for p in cuda_visible.split(",")):
        if not item:
            continue
        if item.isdigit():
            if int(item) >= physical:
                break  # CUDA stops at the first invalid index
        elif physical == 0:
            break
        count += 1
    return count


def run(params: Mapping[str, Any]) -> CheckReport:
    expected = int(option(dict(params), "expected_gpus", 0))
    physical, source = physical_gpus()
    seen = visible(physical, os.environ.get("CUDA_VISIBLE_DEVICES"))
    details = {"physical": physical, "source": source, "expected": expected,
               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    readings: dict[str, int | float | str | bool] = {"accelerator-count": seen}
    if seen != expected:
        return CheckReport(check="accelerator-discovery", status="failed", readings=readings,
                           details=details,
                           message=f"a job sees {seen} GPUs, the site declares {expected}")
    return CheckReport(check="accelerator-discovery", status="passed", readings=readings,
                       details=details, message=f"a job sees {seen} GPUs ({source})")
