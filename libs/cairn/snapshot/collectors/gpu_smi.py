"""Parsers for `nvidia-smi -q -x` (nvsmi DTD XML) and the plain `nvidia-smi` table.

Both give the same names: AICR's `GPU.smi.*` and `GPU.hardware.*`, and Cairn's per-GPU
`GPU.gpu<index>.*` (index = position in nvidia-smi's order, which is PCI bus order).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from cairn.snapshot.collectors.collected import Collected
from cairn.snapshot.model import CollectorError, Reading

_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


def _text(elem: ET.Element | None, path: str) -> str | None:
    if elem is None:
        return None
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _int(value: str | None) -> int | None:
    """Leading integer of "81920 MiB" / "4"; None for "N/A" or a missing element."""
    match = _NUMBER.match(value or "")
    return int(float(match.group(1))) if match else None


def _float(value: str | None) -> float | None:
    match = _NUMBER.match(value or "")
    return float(match.group(1)) if match else None


def summary_readings(
    *, source: str, driver: str | None, cuda: str | None, count: int, first: dict[str, Reading]
) -> dict[str, Reading]:
    """GPU.smi.* (AICR v0.11.1, described by the first GPU) and GPU.hardware.* (AICR later)."""
    out: dict[str, Reading] = {
        "GPU.smi.gpu-count": count,
        "GPU.hardware.gpu-present": count > 0,
        "GPU.hardware.gpu-count": count,
        "GPU.hardware.driver-loaded": True,
        "GPU.hardware.detection-source": source,
    }
    if driver:
        out["GPU.smi.driver"] = driver
    if cuda:
        out["GPU.smi.cuda-version"] = cuda
    # AICR's gpu.* keys describe "the" GPU: nodes are homogeneous in practice, and the
    # per-GPU detail below shows any that differ.
    smi_keys = {
        "model": "gpu.model",
        "architecture": "gpu.product-architecture",
        "display-mode": "gpu.display-mode",
        "display-active": "gpu.display-active",
        "persistence-mode": "gpu.persistence-mode",
        "addressing-mode": "gpu.addressing-mode",
        "vbios-version": "gpu.vbios-version",
        "gsp-firmware-version": "gpu.gsp-firmware-version",
    }
    for key, smi in smi_keys.items():
        if key in first:
            out[f"GPU.smi.{smi}"] = first[key]
    if "model" in first:
        out["GPU.hardware.model"] = first["model"]
    return out


# element path -> Cairn key, for string readings kept verbatim (including "N/A").
_GPU_TEXT = {
    "product_name": "model",
    "product_architecture": "architecture",
    "uuid": "uuid",
    "serial": "serial",
    "vbios_version": "vbios-version",
    "gsp_firmware_version": "gsp-firmware-version",
    "board_part_number": "board-part-number",
    "display_mode": "display-mode",
    "display_active": "display-active",
    "persistence_mode": "persistence-mode",
    "addressing_mode": "addressing-mode",
    "compute_mode": "compute-mode",
    "mig_mode/current_mig": "mig-mode",
    "mig_mode/pending_mig": "mig-mode-pending",
    "ecc_mode/current_ecc": "ecc-mode",
    "ecc_mode/pending_ecc": "ecc-mode-pending",
    "pci/pci_gpu_link_info/link_widths/max_link_width": "pcie-link-width-max",
}
_GPU_INT = {
    "minor_number": "minor-number",
    "gpu_module_id": "module-id",
    "fb_memory_usage/total": "memory-total-mib",
    "pci/pci_gpu_link_info/pcie_gen/max_link_gen": "pcie-link-gen-max",
}


def _gpu_detail(gpu: ET.Element) -> dict[str, Reading]:
    out: dict[str, Reading] = {}
    for path, key in _GPU_TEXT.items():
        value = _text(gpu, path)
        if value is not None:
            out[key] = value
    for path, key in _GPU_INT.items():
        number = _int(_text(gpu, path))
        if number is not None:
            out[key] = number
    bus_id: str = _text(gpu, "pci/pci_bus_id") or gpu.attrib.get("id") or ""
    out["pci-bus-id"] = bus_id
    # DTD v12 moved the power limit under gpu_power_readings; older ones use power_readings.
    limit = _float(
        _text(gpu, "gpu_power_readings/current_power_limit")
        or _text(gpu, "power_readings/power_limit")
    )
    if limit is not None:
        out["power-limit-watts"] = limit
    migs = gpu.findall("mig_devices/mig_device")
    if gpu.find("mig_devices") is not None:
        out["mig-device-count"] = len(migs)
    for position, mig in enumerate(migs):
        index = _int(_text(mig, "index"))
        prefix = f"mig.{position if index is None else index}"
        fields = {
            "gpu-instance-id": _int(_text(mig, "gpu_instance_id")),
            "compute-instance-id": _int(_text(mig, "compute_instance_id")),
            "memory-total-mib": _int(_text(mig, "fb_memory_usage/total")),
            "multiprocessor-count": _int(
                _text(mig, "device_attributes/shared/multiprocessor_count")
            ),
        }
        for key, number in fields.items():
            if number is not None:
                out[f"{prefix}.{key}"] = number
    return out


def parse_query_xml(text: str) -> Collected:
    """Readings of EVERY <gpu> in `nvidia-smi -q -x` output.

    `attached_gpus` is what the driver reports; when the document describes fewer or more
    <gpu> elements (a trimmed capture, a GPU that fell off the bus) the mismatch is recorded
    as an error, and `gpu-count` keeps the driver's number.
    """
    root = ET.fromstring(text)
    gpus = root.findall("gpu")
    attached = _int(_text(root, "attached_gpus"))
    count = len(gpus) if attached is None else attached
    details = [_gpu_detail(gpu) for gpu in gpus]
    readings = summary_readings(
        source="nvidia-smi",
        driver=_text(root, "driver_version"),
        cuda=_text(root, "cuda_version"),
        count=count,
        first=details[0] if details else {},
    )
    readings["GPU.smi.attached-gpus"] = count
    readings["GPU.smi.described-gpus"] = len(gpus)
    for index, detail in enumerate(details):
        for key, value in detail.items():
            readings[f"GPU.gpu{index}.{key}"] = value
    errors = []
    if attached is not None and attached != len(gpus):
        errors.append(
            CollectorError(
                collector="gpu",
                message=f"nvidia-smi reports attached_gpus={attached} but describes "
                f"{len(gpus)} <gpu> element(s)",
            )
        )
    return Collected(readings=readings, errors=errors)


_HEADER = re.compile(r"Driver Version:\s*(\S+)\s+CUDA Version:\s*(\S+)")
_ROW1 = re.compile(
    r"^\|\s*(\d+)\s+(.+?)\s+(On|Off)\s*\|\s*([0-9A-Fa-f]+:[0-9A-Fa-f:.]+)\s+"
    r"(\S+)\s*\|\s*(\S+)\s*\|$"
)
_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_POWER = re.compile(r"(\d+)W\s*/\s*(\d+)W")


def _row_cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_smi_table(text: str) -> Collected:
    """Readings from the plain `nvidia-smi` table (a fallback: it holds far less than -q -x)."""
    lines = text.splitlines()
    header = _HEADER.search(text)
    has_mig_row = "MIG M." in text
    details: list[dict[str, Reading]] = []
    for pos, line in enumerate(lines):
        if "Processes:" in line:
            break
        row = _ROW1.match(line.strip())
        if not row:
            continue
        detail: dict[str, Reading] = {
            "model": row.group(2),
            "persistence-mode": "Enabled" if row.group(3) == "On" else "Disabled",
            "pci-bus-id": row.group(4),
        }
        ecc = row.group(6)
        if ecc.isdigit():  # an error count is shown only when ECC is on
            detail["ecc-mode"] = "Enabled"
        elif ecc == "Off":
            detail["ecc-mode"] = "Disabled"
        second = lines[pos + 1] if pos + 1 < len(lines) else ""
        if mem := _MEM.search(second):
            detail["memory-total-mib"] = int(mem.group(2))
        if power := _POWER.search(second):
            detail["power-limit-watts"] = float(power.group(2))
        cells = _row_cells(second)
        if len(cells) == 3 and cells[2]:
            detail["compute-mode"] = cells[2].split()[-1]
        if has_mig_row and pos + 2 < len(lines):
            third = _row_cells(lines[pos + 2])
            if len(third) == 3 and third[2]:
                detail["mig-mode"] = third[2]
        details.append(detail)
    readings = summary_readings(
        source="nvidia-smi-table",
        driver=header.group(1) if header else None,
        cuda=header.group(2) if header else None,
        count=len(details),
        first=details[0] if details else {},
    )
    for index, detail in enumerate(details):
        for key, value in detail.items():
            readings[f"GPU.gpu{index}.{key}"] = value
    return Collected(readings=readings)
