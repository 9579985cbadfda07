"""GPU parsers on real nvidia-smi outputs (../shared/fixtures) and constructed multi-GPU XML,
and the NVML path with NVML faked at its Python boundary."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cairn.snapshot.collectors import gpu
from cairn.snapshot.collectors.gpu_smi import parse_query_xml, parse_smi_table
from cairn.snapshot.collectors.gpu_topology import parse_topo, topo_readings

DATA = Path(__file__).resolve().parent.parent / "data" / "snapshot"


def test_real_a100_mig_xml_reports_mig_devices_and_flags_the_trimmed_capture(
    shared_fixtures: Path,
) -> None:
    text = (shared_fixtures / "telegraf-a100-sxm4-80gb-mig-v12.xml").read_text()
    result = parse_query_xml(text)
    r = result.readings
    assert r["GPU.smi.driver"] == "535.54.03"
    assert r["GPU.smi.cuda-version"] == "12.2"
    assert r["GPU.smi.gpu.model"] == "NVIDIA A100-SXM4-80GB"
    assert r["GPU.smi.gpu.vbios-version"] == "92.00.36.00.02"
    assert r["GPU.gpu0.uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert r["GPU.gpu0.mig-mode"] == "Enabled"
    assert r["GPU.gpu0.ecc-mode"] == "Enabled"
    assert r["GPU.gpu0.memory-total-mib"] == 81920
    assert r["GPU.gpu0.mig-device-count"] == 4
    assert [r[f"GPU.gpu0.mig.{i}.gpu-instance-id"] for i in range(4)] == [3, 4, 5, 6]
    assert r["GPU.gpu0.mig.0.memory-total-mib"] == 19968
    # attached_gpus says 4; the document holds one <gpu>: kept, and flagged.
    assert r["GPU.smi.gpu-count"] == 4
    assert r["GPU.smi.described-gpus"] == 1
    assert "GPU.gpu1.model" not in r
    assert len(result.errors) == 1
    assert "attached_gpus=4" in result.errors[0].message
    assert "1 <gpu>" in result.errors[0].message


@pytest.mark.parametrize(
    ("name", "count", "model", "driver", "cuda", "mib", "watts"),
    [
        ("h100-sxm-8gpu-q.xml", 8, "NVIDIA H100 80GB HBM3", "565.57.01", "12.7", 81559, 700.0),
        (
            "a100-sxm4-80gb-4gpu-q.xml",
            4,
            "NVIDIA A100-SXM4-80GB",
            "555.42.02",
            "12.5",
            81920,
            500.0,
        ),
    ],
)
def test_constructed_multi_gpu_xml_reports_every_gpu(
    name: str, count: int, model: str, driver: str, cuda: str, mib: int, watts: float
) -> None:
    result = parse_query_xml((DATA / name).read_text())
    r = result.readings
    assert result.errors == []
    assert r["GPU.smi.gpu-count"] == count == r["GPU.hardware.gpu-count"]
    assert r["GPU.hardware.gpu-present"] is True
    assert (r["GPU.smi.driver"], r["GPU.smi.cuda-version"]) == (driver, cuda)
    for index in range(count):
        assert r[f"GPU.gpu{index}.model"] == model
        assert r[f"GPU.gpu{index}.memory-total-mib"] == mib
        assert r[f"GPU.gpu{index}.power-limit-watts"] == watts
        assert r[f"GPU.gpu{index}.mig-mode"] == "Disabled"
        assert r[f"GPU.gpu{index}.mig-device-count"] == 0
        assert r[f"GPU.gpu{index}.ecc-mode"] == "Enabled"
    uuids = {r[f"GPU.gpu{i}.uuid"] for i in range(count)}
    assert len(uuids) == count
    assert f"GPU.gpu{count}.model" not in r


def test_xml_and_table_of_the_same_machine_agree(shared_fixtures: Path) -> None:
    table = parse_smi_table((shared_fixtures / "h100-sxm-8gpu-nvidia-smi.txt").read_text())
    xml = parse_query_xml((DATA / "h100-sxm-8gpu-q.xml").read_text())
    for key in (
        "GPU.smi.driver",
        "GPU.smi.cuda-version",
        "GPU.smi.gpu-count",
        "GPU.smi.gpu.model",
        "GPU.gpu7.pci-bus-id",
        "GPU.gpu7.memory-total-mib",
        "GPU.gpu3.persistence-mode",
        "GPU.gpu0.mig-mode",
        "GPU.gpu5.ecc-mode",
    ):
        assert table.readings[key] == xml.readings[key], key


@pytest.mark.parametrize(
    ("name", "count", "model", "bus3", "mib"),
    [
        ("h100-sxm-8gpu-nvidia-smi.txt", 8, "NVIDIA H100 80GB HBM3", "00000000:5D:00.0", 81559),
        (
            "a100-sxm4-80gb-4gpu-nvidia-smi.txt",
            4,
            "NVIDIA A100-SXM4-80GB",
            "00000000:D4:00.0",
            81920,
        ),
    ],
)
def test_plain_table_fallback(
    shared_fixtures: Path, name: str, count: int, model: str, bus3: str, mib: int
) -> None:
    r = parse_smi_table((shared_fixtures / name).read_text()).readings
    assert r["GPU.hardware.detection-source"] == "nvidia-smi-table"
    assert r["GPU.smi.gpu-count"] == count
    assert all(r[f"GPU.gpu{i}.model"] == model for i in range(count))
    assert r["GPU.gpu3.pci-bus-id"] == bus3
    assert r["GPU.gpu3.memory-total-mib"] == mib
    assert r["GPU.gpu0.compute-mode"] == "Default"


def test_topo_m_of_the_h200_node(shared_fixtures: Path) -> None:
    topo = parse_topo((shared_fixtures / "h200-8gpu-topo-m.txt").read_text())
    assert topo.gpus == [f"GPU{i}" for i in range(8)]
    assert topo.nics == [f"NIC{i}" for i in range(8)]
    r = topo_readings(topo)
    gpu_pairs = [k for k in r if k.startswith("GPU.topology.GPU") and "NIC" not in k]
    assert len(gpu_pairs) == 28  # 8 choose 2: every pair once
    assert {r[k] for k in gpu_pairs} == {"NV18"}
    assert r["GPU.topology.GPU0-NIC4"] == "PIX"
    assert r["GPU.topology.GPU7-NIC2"] == "PIX"
    assert r["GPU.topology.GPU0-NIC2"] == "SYS"
    assert r["GPU.topology.nic-count"] == 8
    assert r["GPU.topology.NIC5"] == "mlx5_5"
    assert r["GPU.gpu0.cpu-affinity"] == "0-63,128-191"
    assert r["GPU.gpu0.numa-affinity"] == "0"
    assert r["GPU.gpu7.cpu-affinity"] == "64-127,192-255"
    assert r["GPU.gpu7.numa-affinity"] == "1"
    assert "GPU.gpu0.numa-id" not in r  # "N/A" is not a reading


class FakeNVMLError(Exception):
    pass


def fake_nvml(count: int = 2, *, init_fails: bool = False) -> Any:
    """An object with pynvml's functions, answering like an 80 GB A100 with MIG on GPU 1."""

    def handle(i: int) -> dict[str, Any]:
        return {"index": i}

    def mig_mode(h: dict[str, Any]) -> list[int]:
        return [1, 1] if h["index"] == 1 else [0, 0]

    def mig_handle(h: dict[str, Any], slot: int) -> dict[str, Any]:
        if slot not in (0, 2):
            raise FakeNVMLError("Not Found")  # MIG slots need not be contiguous
        return {"mig": slot}

    def init() -> None:
        if init_fails:
            raise FakeNVMLError("NVML Shared Library Not Found")

    def not_supported(h: object) -> None:
        raise FakeNVMLError("Not Supported")

    return SimpleNamespace(
        NVMLError=FakeNVMLError,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "570.133.20",
        nvmlSystemGetCudaDriverVersion=lambda: 12080,
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetName=lambda h: b"NVIDIA A100-SXM4-80GB",  # old pynvml returns bytes
        nvmlDeviceGetArchitecture=lambda h: 7,
        nvmlDeviceGetUUID=lambda h: f"GPU-fake-{h['index']}",
        nvmlDeviceGetSerial=not_supported,
        nvmlDeviceGetVbiosVersion=lambda h: "92.00.36.00.02",
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=f"00000000:0{h['index']}:00.0"),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(
            total=20937965568 if "mig" in h else 85899345920
        ),
        nvmlDeviceGetPersistenceMode=lambda h: 1,
        nvmlDeviceGetMigMode=mig_mode,
        nvmlDeviceGetEccMode=lambda h: [1, 1],
        nvmlDeviceGetPowerManagementLimit=lambda h: 400000,
        nvmlDeviceGetMaxMigDeviceCount=lambda h: 7,
        nvmlDeviceGetMigDeviceHandleByIndex=mig_handle,
        nvmlDeviceGetGpuInstanceId=lambda h: 3 + h["mig"],
        nvmlDeviceGetComputeInstanceId=lambda h: 0,
    )


def no_smi(tmp_path: Path) -> str:
    return str(tmp_path / "no-such-nvidia-smi")


def test_nvml_path_reads_every_gpu_and_mig_device(tmp_path: Path) -> None:
    result = gpu.collect(nvml=fake_nvml(), smi=no_smi(tmp_path))
    r = result.readings
    assert r["GPU.hardware.detection-source"] == "nvml"
    assert r["GPU.smi.driver"] == "570.133.20"
    assert r["GPU.smi.cuda-version"] == "12.8"
    assert r["GPU.smi.gpu-count"] == 2
    assert r["GPU.gpu0.model"] == "NVIDIA A100-SXM4-80GB"
    assert r["GPU.gpu0.architecture"] == "Ampere"
    assert r["GPU.gpu0.memory-total-mib"] == 81920
    assert r["GPU.gpu0.power-limit-watts"] == 400.0
    assert r["GPU.gpu0.mig-mode"] == "Disabled"
    assert "GPU.gpu0.serial" not in r  # not supported: skipped, not an error
    assert r["GPU.gpu1.mig-mode"] == "Enabled"
    assert r["GPU.gpu1.mig-device-count"] == 2
    assert r["GPU.gpu1.mig.1.gpu-instance-id"] == 5
    assert r["GPU.gpu1.mig.0.memory-total-mib"] == 19968
    # nvidia-smi is absent, so the topology is recorded as absent, not failed.
    assert [(e.collector, e.absent) for e in result.errors] == [("gpu-topology", True)]


def test_zero_gpus_is_a_reading_not_an_error(tmp_path: Path) -> None:
    result = gpu.collect(nvml=fake_nvml(count=0), smi=no_smi(tmp_path))
    assert result.errors == []
    assert result.readings["GPU.hardware.gpu-present"] is False
    assert result.readings["GPU.hardware.gpu-count"] == 0


def test_no_driver_and_no_nvidia_smi_is_recorded_as_absent(tmp_path: Path) -> None:
    result = gpu.collect(nvml=fake_nvml(init_fails=True), smi=no_smi(tmp_path))
    assert result.readings == {}
    assert len(result.errors) == 1
    error = result.errors[0]
    assert error.absent and error.collector == "gpu"
    assert "not found" in error.message


def fake_smi(tmp_path: Path, shared: Path, xml: Path | None, topo: bool = True) -> str:
    """An nvidia-smi script that prints recorded outputs."""
    script = tmp_path / "nvidia-smi"
    xml_case = f'cat "{xml}"' if xml else 'echo "Failed to initialize" >&2; exit 9'
    topo_case = f'cat "{shared / "h200-8gpu-topo-m.txt"}"' if topo else "exit 3"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-q" ]; then {xml_case}; exit 0; fi\n'
        f'if [ "$1" = "topo" ]; then {topo_case}; exit 0; fi\n'
        f'cat "{shared / "h100-sxm-8gpu-nvidia-smi.txt"}"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_nvidia_smi_path_with_topology(tmp_path: Path, shared_fixtures: Path) -> None:
    smi = fake_smi(tmp_path, shared_fixtures, DATA / "h100-sxm-8gpu-q.xml")
    result = gpu.collect(nvml=fake_nvml(init_fails=True), smi=smi)
    assert result.errors == []
    r = result.readings
    assert r["GPU.hardware.detection-source"] == "nvidia-smi"
    assert r["GPU.gpu7.model"] == "NVIDIA H100 80GB HBM3"
    assert r["GPU.topology.GPU0-GPU7"] == "NV18"


def test_unusable_xml_falls_back_to_the_table(tmp_path: Path, shared_fixtures: Path) -> None:
    smi = fake_smi(tmp_path, shared_fixtures, None, topo=False)
    result = gpu.collect(nvml=fake_nvml(init_fails=True), smi=smi)
    assert result.readings["GPU.hardware.detection-source"] == "nvidia-smi-table"
    assert result.readings["GPU.smi.gpu-count"] == 8
    assert {e.collector for e in result.errors} == {"gpu", "gpu-topology"}
    assert not any(e.absent for e in result.errors)


def test_a_hung_nvidia_smi_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(0o755)
    monkeypatch.setattr(gpu, "SMI_TIMEOUT", 0.3)
    result = gpu.collect(nvml=fake_nvml(init_fails=True), smi=str(script))
    assert result.readings == {}
    assert "TimeoutExpired" in result.errors[0].message
    assert os.path.exists(script)
