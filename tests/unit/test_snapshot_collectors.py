"""OS, hardware, Docker and Slurm parsers on recorded outputs; failure handling of collectors."""

from __future__ import annotations

import json
import time
from pathlib import Path

from cairn.snapshot.collect import collect_local
from cairn.snapshot.collectors import (
    ClusterCollected,
    Collected,
    ToolAbsent,
    container,
    guarded,
    hardware,
    os_info,
    slurm,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "snapshot"
SLURM = DATA / "slurm-22.05"

OS_RELEASE = """PRETTY_NAME="Ubuntu 24.04.2 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.2 LTS (Noble Numbat)"
ID=ubuntu
ID_LIKE=debian
# a comment
"""
CMDLINE = (
    "BOOT_IMAGE=/vmlinuz-6.8.0-1024-aws root=PARTUUID=1234 ro iommu=pt "
    "pci=realloc=off quiet splash -- init-arg"
)
MODULES = """nvidia_uvm 4956160 0 - Live 0x0000000000000000 (POE)
nvidia 54132736 1 nvidia_uvm, Live 0x0000000000000000 (POE)
ib_core 458752 0 - Live 0x0000000000000000
"""


def test_os_readings_use_aicr_names() -> None:
    r = os_info.os_readings(
        os_release=OS_RELEASE,
        cmdline=CMDLINE,
        modules=MODULES,
        sysctls={"/proc/sys/kernel/osrelease": "6.8.0-1024-aws"},
    )
    assert r["OS.release.ID"] == "ubuntu"
    assert r["OS.release.VERSION_ID"] == "24.04"
    assert r["OS.release.PRETTY_NAME"] == "Ubuntu 24.04.2 LTS"
    assert r["OS.sysctl./proc/sys/kernel/osrelease"] == "6.8.0-1024-aws"
    assert r["OS.kmod.nvidia"] is True and r["OS.kmod.nvidia_uvm"] is True
    assert r["OS.grub.iommu"] == "pt"
    assert r["OS.grub.pci"] == "realloc=off"  # split on the first "=" only
    assert r["OS.grub.quiet"] == "true"
    assert "OS.grub.init-arg" not in r  # after "--": init's, not the kernel's


def test_os_collector_on_a_recorded_tree(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text(OS_RELEASE)
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.8.0-1024-aws\n")
    (tmp_path / "proc/cmdline").write_text(CMDLINE + "\n")
    result = os_info.collect(root=str(tmp_path))
    assert result.errors == []  # no /proc/modules: a kernel without modules, not a failure
    assert result.readings["OS.sysctl./proc/sys/kernel/osrelease"] == "6.8.0-1024-aws"
    assert not any(key.startswith("OS.kmod.") for key in result.readings)


CPUINFO = "".join(
    f"processor\t: {i}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9534 64-Core Processor\n"
    f"physical id\t: {i // 4}\ncpu cores\t: 2\nsiblings\t: 4\n\n"
    for i in range(8)
)


def test_cpuinfo_counts_sockets_cores_and_threads() -> None:
    r = hardware.parse_cpuinfo(CPUINFO, "x86_64")
    assert r == {
        "CPU.info.threads": 8,
        "CPU.info.arch": "x86_64",
        "CPU.info.model": "AMD EPYC 9534 64-Core Processor",
        "CPU.info.vendor": "AuthenticAMD",
        "CPU.info.sockets": 2,
        "CPU.info.cores": 4,
    }


def test_meminfo_and_numa(tmp_path: Path) -> None:
    r = hardware.parse_meminfo("MemTotal:  1000 kB\nMemAvailable: 500 kB\nHugePages_Total: 4\n")
    assert r == {
        "Memory.info.total-bytes": 1024000,
        "Memory.info.available-bytes": 512000,
        "Memory.info.hugepages-total": 4,
    }
    for node, cpus in ((0, "0-63,128-191"), (1, "64-127,192-255")):
        d = tmp_path / f"node{node}"
        d.mkdir()
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(f"Node {node} MemTotal:       1024 kB\n")
    r = hardware.numa_readings(tmp_path)
    assert r["NUMA.info.node-count"] == 2
    assert r["NUMA.node1.cpus"] == "64-127,192-255"
    assert r["NUMA.node0.memory-total-bytes"] == 1048576


def test_docker_info_recorded_and_with_an_nvidia_runtime() -> None:
    info = json.loads((DATA / "docker-info-20.10.json").read_text())
    r = container.info_readings(info)
    assert r["Container.docker.version"] == "20.10.24+dfsg1"
    assert r["Container.docker.runtimes"] == [
        "io.containerd.runc.v2",
        "io.containerd.runtime.v1.linux",
        "runc",
    ]
    assert r["Container.docker.nvidia-runtime"] is False
    assert r["Container.docker.default-runtime"] == "runc"
    assert r["Container.docker.cgroup-driver"] == "cgroupfs"
    assert r["Container.docker.cgroup-version"] == "1"
    info["Runtimes"]["nvidia"] = {"path": "nvidia-container-runtime"}
    info["DefaultRuntime"] = "nvidia"
    r = container.info_readings(info)
    assert r["Container.docker.nvidia-runtime"] is True
    assert r["Container.docker.default-runtime"] == "nvidia"


def test_slurm_recorded_22_05() -> None:
    nodes, release = slurm.parse_sinfo_json((SLURM / "sinfo-json.json").read_text())
    assert release == "22.05.8"
    assert nodes["localhost"]["gres"] == "gpu:2" and nodes["localhost"]["gpus"] == 2
    text_nodes = slurm.parse_sinfo_text((SLURM / "sinfo-nodes.txt").read_text())
    for key in ("cpus", "memory-mb", "gres", "gpus", "state", "partitions"):
        assert text_nodes["localhost"][key] == nodes["localhost"][key], key
    r = slurm.cluster_readings(
        config=slurm.parse_config((SLURM / "scontrol-show-config.txt").read_text()),
        nodes=nodes,
        partitions=slurm.parse_partitions(
            (SLURM / "scontrol-show-partition-oneliner.txt").read_text()
        ),
    )
    assert r["Slurm.cluster.version"] == "22.05.8"
    assert r["Slurm.cluster.name"] == "cairn-test"
    assert r["Slurm.cluster.gpu-count"] == 2
    assert r["Slurm.config.SelectType"] == "select/cons_tres"
    assert r["Slurm.partition.debug.default"] is True
    assert r["Slurm.partition.debug.state"] == "UP"
    assert r["Slurm.partition.debug.total-nodes"] == 1
    assert r["Slurm.node.localhost.partitions"] == ["debug"]


def test_gres_strings() -> None:
    assert slurm.gres_gpus("gpu:a100:4(S:0-1),gpu:h100:2") == 6
    assert slurm.gres_gpus("") == 0
    assert slurm.gres_gpus("shard:8") == 0


def test_a_collector_that_raises_is_recorded_not_crashed() -> None:
    @guarded("boom")
    def boom() -> Collected:
        raise RuntimeError("disk on fire")

    @guarded("tool")
    def absent() -> Collected:
        raise ToolAbsent("frobctl not found")

    def slow() -> Collected:
        time.sleep(2)
        return Collected(readings={"Slow.x.y": 1})

    snap = collect_local(
        "site-a",
        node_name="n1",
        deadline=0.5,
        cluster={},
        collectors={
            "boom": boom,
            "tool": absent,
            "slow": slow,
            "ok": lambda: Collected(readings={"CPU.info.threads": 2}),
        },
    )
    assert snap.readings("n1") == {"CPU.info.threads": 2}
    errors = {e.collector: e for e in snap.node("n1").errors}
    assert errors["boom"].message == "RuntimeError: disk on fire" and not errors["boom"].absent
    assert errors["tool"].absent and errors["tool"].message == "frobctl not found"
    assert "did not finish within 0.5s" in errors["slow"].message


def test_cluster_collectors_add_cluster_facts_and_other_nodes() -> None:
    def fake_cluster() -> ClusterCollected:
        return ClusterCollected(
            cluster={"Slurm.cluster.version": "22.05.8"},
            nodes={"n2": {"K8s.node.gpu-allocatable": 0}},
        )

    snap = collect_local("site-a", node_name="n1", collectors={}, cluster={"c": fake_cluster})
    assert snap.readings()["Slurm.cluster.version"] == "22.05.8"
    assert [n.node for n in snap.nodes] == ["n1", "n2"]


def fake_tools(tmp_path: Path, scripts: dict[str, str]) -> dict[str, str]:
    """A PATH holding only the given shell scripts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in scripts.items():
        tool = bin_dir / name
        tool.write_text("#!/bin/sh\n" + body + "\n")
        tool.chmod(0o755)
    return {"PATH": str(bin_dir)}


def test_slurm_without_json_uses_text_quietly(tmp_path: Path) -> None:
    env = fake_tools(
        tmp_path,
        {
            "scontrol": (
                f'if [ "$2" = config ]; then /bin/cat "{SLURM}/scontrol-show-config.txt"; '
                f'else /bin/cat "{SLURM}/scontrol-show-partition-oneliner.txt"; fi'
            ),
            "sinfo": (
                'if [ "$1" = --json ]; then echo "sinfo: unrecognized option \'--json\'" >&2; '
                f'exit 1; fi; /bin/cat "{SLURM}/sinfo-nodes.txt"'
            ),
        },
    )
    result = slurm.collect(env=env)
    assert result.errors == []
    assert result.cluster["Slurm.node.localhost.gpus"] == 2
    assert result.cluster["Slurm.cluster.version"] == "22.05.8"


def test_slurm_tools_absent_is_recorded_as_absent(tmp_path: Path) -> None:
    result = slurm.collect(env=fake_tools(tmp_path, {}))
    assert [(e.collector, e.absent) for e in result.errors] == [("slurm", True)]
    assert "scontrol not found" in result.errors[0].message
