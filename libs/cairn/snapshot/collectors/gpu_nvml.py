"""GPU readings through NVML (`pynvml`, from the nvidia-ml-py package).

The module is passed in rather than imported here, so tests hand in a fake object with the
same functions; `load_nvml` imports the real one lazily (it is an optional extra).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from cairn.snapshot.collectors.collected import Collected
from cairn.snapshot.collectors.gpu_smi import summary_readings
from cairn.snapshot.model import Reading

# nvmlDeviceGetArchitecture codes (nvml.h NVML_DEVICE_ARCH_*), named as nvidia-smi names them.
_ARCH = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
}


def load_nvml() -> ModuleType | None:
    """The real pynvml module, or None when nvidia-ml-py is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def _str(value: object) -> str:
    # Old pynvml releases return bytes, newer ones str.
    return value.decode() if isinstance(value, bytes) else str(value)


def _mode(value: object) -> str:
    return "Enabled" if value else "Disabled"


class _Reader:
    """Calls NVML getters, skipping the ones this GPU or driver does not support."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.error: type[BaseException] = getattr(nvml, "NVMLError", Exception)

    def get(self, name: str, *args: object) -> Any:
        func: Callable[..., Any] | None = getattr(self.nvml, name, None)
        if func is None:
            return None
        try:
            return func(*args)
        except self.error:  # NotSupported on this GPU, or a getter newer than the driver
            return None


def _device(reader: _Reader, handle: object) -> dict[str, Reading]:
    out: dict[str, Reading] = {}
    if (name := reader.get("nvmlDeviceGetName", handle)) is not None:
        out["model"] = _str(name)
    if (arch := reader.get("nvmlDeviceGetArchitecture", handle)) is not None:
        out["architecture"] = _ARCH.get(int(arch), str(arch))
    for getter, key in (
        ("nvmlDeviceGetUUID", "uuid"),
        ("nvmlDeviceGetSerial", "serial"),
        ("nvmlDeviceGetVbiosVersion", "vbios-version"),
        ("nvmlDeviceGetBoardPartNumber", "board-part-number"),
    ):
        if (value := reader.get(getter, handle)) is not None:
            out[key] = _str(value)
    if (pci := reader.get("nvmlDeviceGetPciInfo", handle)) is not None:
        out["pci-bus-id"] = _str(pci.busId)
    if (memory := reader.get("nvmlDeviceGetMemoryInfo", handle)) is not None:
        out["memory-total-mib"] = int(memory.total) // (1024 * 1024)
    if (persistence := reader.get("nvmlDeviceGetPersistenceMode", handle)) is not None:
        out["persistence-mode"] = _mode(persistence)
    if (mig := reader.get("nvmlDeviceGetMigMode", handle)) is not None:
        out["mig-mode"], out["mig-mode-pending"] = _mode(mig[0]), _mode(mig[1])
    if (ecc := reader.get("nvmlDeviceGetEccMode", handle)) is not None:
        out["ecc-mode"], out["ecc-mode-pending"] = _mode(ecc[0]), _mode(ecc[1])
    if (limit := reader.get("nvmlDeviceGetPowerManagementLimit", handle)) is not None:
        out["power-limit-watts"] = float(limit) / 1000.0  # NVML reports milliwatts
    if out.get("mig-mode") == "Enabled":
        out.update(_mig_devices(reader, handle))
    return out


def _mig_devices(reader: _Reader, handle: object) -> dict[str, Reading]:
    out: dict[str, Reading] = {}
    slots = reader.get("nvmlDeviceGetMaxMigDeviceCount", handle) or 0
    found = 0
    for slot in range(int(slots)):
        mig = reader.get("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if mig is None:  # empty slots raise NotFound: MIG devices need not be contiguous
            continue
        prefix = f"mig.{found}"
        found += 1
        for getter, key in (
            ("nvmlDeviceGetGpuInstanceId", "gpu-instance-id"),
            ("nvmlDeviceGetComputeInstanceId", "compute-instance-id"),
        ):
            if (value := reader.get(getter, mig)) is not None:
                out[f"{prefix}.{key}"] = int(value)
        if (memory := reader.get("nvmlDeviceGetMemoryInfo", mig)) is not None:
            out[f"{prefix}.memory-total-mib"] = int(memory.total) // (1024 * 1024)
    out["mig-device-count"] = found
    return out


def _cuda_version(raw: object) -> str | None:
    if raw is None:
        return None
    value = int(raw)  # type: ignore[call-overload]
    return f"{value // 1000}.{(value % 1000) // 10}"  # 12020 -> "12.2"


def nvml_collect(nvml: Any) -> Collected:
    """Every GPU NVML sees. Raises nvml.NVMLError when NVML cannot start (no driver)."""
    nvml.nvmlInit()
    try:
        reader = _Reader(nvml)
        driver = reader.get("nvmlSystemGetDriverVersion")
        cuda = _cuda_version(reader.get("nvmlSystemGetCudaDriverVersion"))
        count = int(nvml.nvmlDeviceGetCount())
        details = [_device(reader, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    finally:
        nvml.nvmlShutdown()
    readings = summary_readings(
        source="nvml",
        driver=None if driver is None else _str(driver),
        cuda=cuda,
        count=count,
        first=details[0] if details else {},
    )
    for index, detail in enumerate(details):
        for key, value in detail.items():
            readings[f"GPU.gpu{index}.{key}"] = value
    return Collected(readings=readings)
