"""GPU collector: NVML first (fast, in-process), else `nvidia-smi -q -x`, else the plain
`nvidia-smi` table; then `nvidia-smi topo -m` for links and affinity.

No driver and no nvidia-smi is recorded as absent; a driver that sees no GPU gives
`GPU.hardware.gpu-present = false, gpu-count = 0` with no error.
"""

from __future__ import annotations

import subprocess
from typing import Any

from cairn.snapshot.collectors.collected import Collected, ToolAbsent, guarded
from cairn.snapshot.collectors.command import CommandFailed, run_command
from cairn.snapshot.collectors.gpu_nvml import load_nvml, nvml_collect
from cairn.snapshot.collectors.gpu_smi import parse_query_xml, parse_smi_table, summary_readings
from cairn.snapshot.collectors.gpu_topology import parse_topo, topo_readings
from cairn.snapshot.model import CollectorError

SMI_TIMEOUT = 10.0
"""nvidia-smi -q -x on an 8-GPU node without persistence mode can take seconds."""

_NO_DEVICES = "No devices were found"


def _zero_gpus(source: str) -> Collected:
    return Collected(
        readings=summary_readings(source=source, driver=None, cuda=None, count=0, first={})
    )


def _from_smi(smi: str, errors: list[CollectorError]) -> Collected:
    try:
        return parse_query_xml(run_command([smi, "-q", "-x"], timeout=SMI_TIMEOUT))
    except CommandFailed as exc:
        if _NO_DEVICES in exc.output:
            return _zero_gpus("nvidia-smi")
        errors.append(CollectorError(collector="gpu", message=f"{exc}; using the table"))
    except Exception as exc:  # malformed XML from an odd driver: the table may still parse
        errors.append(
            CollectorError(
                collector="gpu", message=f"nvidia-smi -q -x unusable ({exc}); using the table"
            )
        )
    return parse_smi_table(run_command([smi], timeout=SMI_TIMEOUT))


def _topology(smi: str) -> Collected:
    try:
        text = run_command([smi, "topo", "-m"], timeout=SMI_TIMEOUT)
        return Collected(readings=topo_readings(parse_topo(text)))
    except ToolAbsent as exc:
        return Collected(
            errors=[CollectorError(collector="gpu-topology", message=str(exc), absent=True)]
        )
    except (CommandFailed, subprocess.TimeoutExpired, ValueError) as exc:
        return Collected(errors=[CollectorError(collector="gpu-topology", message=str(exc))])


@guarded("gpu")
def collect(*, nvml: Any = None, smi: str = "nvidia-smi") -> Collected:
    """Collect GPU readings of this machine.

    Args:
        nvml: an NVML module (tests pass a fake); by default pynvml is imported if installed.
        smi: the nvidia-smi program (tests may point it at a script).
    """
    errors: list[CollectorError] = []
    module = nvml if nvml is not None else load_nvml()
    result: Collected | None = None
    nvml_failure = "pynvml not installed"
    if module is not None:
        try:
            result = nvml_collect(module)
        except Exception as exc:  # NVMLError_LibraryNotFound etc.: no driver loaded here
            nvml_failure = f"NVML unavailable ({exc})"
    if result is None:
        try:
            result = _from_smi(smi, errors)
        except ToolAbsent:
            raise ToolAbsent(f"{smi} not found; {nvml_failure}") from None
    result.errors[:0] = errors
    if result.readings.get("GPU.hardware.gpu-count", 0):
        topo = _topology(smi)
        result.readings.update(topo.readings)
        result.errors.extend(topo.errors)
    return result
