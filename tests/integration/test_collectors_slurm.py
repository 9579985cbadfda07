"""The Slurm collector against a real one-node cluster (tests/fixtures/slurm.py)."""

from __future__ import annotations

import re
from pathlib import Path

from cairn.snapshot.collectors import slurm
from tests.fixtures.slurm import SlurmCluster, free_port


def test_slurm_collector_sees_the_cluster_and_its_gpus(slurm_cluster: SlurmCluster) -> None:
    result = slurm.collect(env=slurm_cluster.env)
    assert result.errors == []
    r = result.cluster
    assert str(r["Slurm.cluster.version"]).count(".") == 2
    assert r["Slurm.cluster.node-count"] == 1
    node = slurm_cluster.node
    assert r[f"Slurm.node.{node}.gres"] == f"gpu:{slurm_cluster.gpus}"
    assert r[f"Slurm.node.{node}.gpus"] == slurm_cluster.gpus
    assert r["Slurm.cluster.gpu-count"] == slurm_cluster.gpus
    assert r[f"Slurm.node.{node}.partitions"] == [slurm_cluster.partition]
    assert r[f"Slurm.partition.{slurm_cluster.partition}.default"] is True
    assert r[f"Slurm.partition.{slurm_cluster.partition}.state"] == "UP"
    assert r["Slurm.config.GresTypes"] == "gpu"


def test_text_fallback_agrees_with_json(slurm_cluster: SlurmCluster) -> None:
    from cairn.snapshot.collectors.command import run_command

    text = run_command(["sinfo", "-h", "-N", "-o", slurm.NODE_FORMAT], env=slurm_cluster.env)
    json_nodes, _ = slurm.parse_sinfo_json(run_command(["sinfo", "--json"], env=slurm_cluster.env))
    text_nodes = slurm.parse_sinfo_text(text)
    for key in ("cpus", "memory-mb", "gres", "gpus", "partitions"):
        assert text_nodes[slurm_cluster.node][key] == json_nodes[slurm_cluster.node][key]


def test_no_controller_is_an_error_within_the_timeout(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # Same cluster, but a controller port nothing listens on: the clients retry for ~10 s.
    conf = tmp_path / "slurm.conf"
    text = re.sub(
        r"SlurmctldPort=\d+", f"SlurmctldPort={free_port()}", slurm_cluster.conf.read_text()
    )
    conf.write_text(text)
    # The error names the expired timeout: the collector gave up instead of waiting out the
    # clients' own retries.
    result = slurm.collect(env={**slurm_cluster.env, "SLURM_CONF": str(conf)}, timeout=1.5)
    assert result.cluster == {}
    assert result.errors[0].collector == "slurm"
    assert "TimeoutExpired" in result.errors[0].message
