"""Slurm collector (Cairn names: AICR has none for a bare Slurm cluster). All cluster-level.

    Slurm.cluster.{version, name, node-count, partition-count, gpu-count}
    Slurm.config.<Key>          selected `scontrol show config` settings (SelectType, ...)
    Slurm.partition.<name>.{state, default, max-time, nodes, total-cpus, total-nodes}
    Slurm.node.<name>.{cpus, memory-mb, gres, gpus, state, partitions, architecture,
                       slurmd-version}

Nodes come from `sinfo --json`, or from `sinfo` text where --json is not supported (or
not understood); partitions from `scontrol show partition --oneliner`, which every release
prints the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from cairn.snapshot.collectors.collected import ClusterCollected, guarded_cluster
from cairn.snapshot.collectors.command import DEFAULT_TIMEOUT, CommandFailed, run_command
from cairn.snapshot.model import CollectorError, Reading

CONFIG_KEYS = (
    "SelectType",
    "SelectTypeParameters",
    "GresTypes",
    "ProctrackType",
    "TaskPlugin",
    "SchedulerType",
    "AuthType",
    "MpiDefault",
    "PrologFlags",
)

_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")
NODE_FORMAT = "%N|%c|%m|%G|%T|%P"


def gres_gpus(gres: str) -> int:
    """GPUs in a GRES string: "gpu:2", "gpu:a100:4(S:0-1)", "gpu:a100:4,gpu:h100:2"."""
    return sum(int(n) for n in _GPU_GRES.findall(gres))


def parse_key_values(line: str) -> dict[str, str]:
    """`Key=Value Key=Value` as scontrol prints it; a word without "=" continues the value
    before it (node OS strings hold spaces)."""
    out: dict[str, str] = {}
    last = None
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep and key and key[0].isalpha():
            out[key] = value
            last = key
        elif last is not None:
            out[last] += " " + token
    return out


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config`: `Key = value` lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_partitions(text: str) -> dict[str, dict[str, Reading]]:
    """`scontrol show partition --oneliner`: one partition per line."""
    out: dict[str, dict[str, Reading]] = {}
    for line in text.splitlines():
        fields = parse_key_values(line)
        name = fields.get("PartitionName")
        if not name:
            continue
        part: dict[str, Reading] = {
            "state": fields.get("State", ""),
            "default": fields.get("Default", "NO") == "YES",
            "max-time": fields.get("MaxTime", ""),
            "nodes": fields.get("Nodes", ""),
        }
        for src, key in (("TotalCPUs", "total-cpus"), ("TotalNodes", "total-nodes")):
            if fields.get(src, "").isdigit():
                part[key] = int(fields[src])
        out[name] = part
    return out


def _json_node(node: Mapping[str, Any]) -> dict[str, Reading]:
    gres = str(node.get("gres") or "")
    state = node.get("state", "")
    out: dict[str, Reading] = {
        "cpus": int(node.get("cpus", 0)),
        "memory-mb": int(node.get("real_memory", 0)),
        "gres": gres,
        "gpus": gres_gpus(gres),
        # 22.05 gives a string; later releases a list of flags.
        "state": ",".join(state) if isinstance(state, list) else str(state),
        "partitions": sorted(str(p) for p in node.get("partitions") or []),
    }
    for src, key in (("architecture", "architecture"), ("slurmd_version", "slurmd-version")):
        if node.get(src):
            out[key] = str(node[src])
    return out


def parse_sinfo_json(text: str) -> tuple[dict[str, dict[str, Reading]], str | None]:
    """Nodes and the Slurm release from `sinfo --json` (22.05 `nodes`; 23.x+ `sinfo` rows)."""
    data = json.loads(text)
    release = data.get("meta", {}).get("Slurm", {}).get("release")
    nodes: dict[str, dict[str, Reading]] = {}
    if "nodes" in data:
        for node in data["nodes"]:
            nodes[str(node["name"])] = _json_node(node)
    elif "sinfo" in data:
        for row in data["sinfo"]:  # later releases: one row per node set; names in nodes.nodes
            for name in row.get("nodes", {}).get("nodes", []):
                nodes[str(name)] = _json_node(
                    {
                        **row.get("node", {}),
                        "name": name,
                        "cpus": row.get("cpus", {}).get("maximum", 0),
                        "real_memory": row.get("memory", {}).get("maximum", 0),
                        "gres": row.get("gres", {}).get("total", ""),
                        "partitions": [row.get("partition", {}).get("name", "")],
                    }
                )
    else:
        raise ValueError("sinfo --json has neither 'nodes' nor 'sinfo'")
    return nodes, None if release is None else str(release)


def parse_sinfo_text(text: str) -> dict[str, dict[str, Reading]]:
    """Nodes from `sinfo -h -N -o '%N|%c|%m|%G|%T|%P'` (one line per node and partition)."""
    nodes: dict[str, dict[str, Reading]] = {}
    for line in text.splitlines():
        cells = line.strip().split("|")
        if len(cells) != 6:
            continue
        name, cpus, memory, gres, state, partition = cells
        gres = "" if gres == "(null)" else gres
        node = nodes.setdefault(
            name,
            {
                "cpus": int(cpus) if cpus.isdigit() else 0,
                "memory-mb": int(memory) if memory.isdigit() else 0,
                "gres": gres,
                "gpus": gres_gpus(gres),
                "state": state,
                "partitions": [],
            },
        )
        partitions = node["partitions"]
        assert isinstance(partitions, list)
        partitions.append(partition.rstrip("*"))  # "*" marks the default partition
        partitions.sort()
    return nodes


def cluster_readings(
    *,
    config: Mapping[str, str],
    nodes: Mapping[str, Mapping[str, Reading]],
    partitions: Mapping[str, Mapping[str, Reading]],
    release: str | None = None,
) -> dict[str, Reading]:
    out: dict[str, Reading] = {}
    version = config.get("SLURM_VERSION") or release
    if version:
        out["Slurm.cluster.version"] = version
    if config.get("ClusterName"):
        out["Slurm.cluster.name"] = config["ClusterName"]
    out["Slurm.cluster.node-count"] = len(nodes)
    out["Slurm.cluster.partition-count"] = len(partitions)
    out["Slurm.cluster.gpu-count"] = sum(
        gpus for n in nodes.values() if isinstance(gpus := n.get("gpus", 0), int)
    )
    for key in CONFIG_KEYS:
        if key in config:
            out[f"Slurm.config.{key}"] = config[key]
    for name, part in partitions.items():
        for key, value in part.items():
            out[f"Slurm.partition.{name}.{key}"] = value
    for name, node in nodes.items():
        for key, value in node.items():
            out[f"Slurm.node.{name}.{key}"] = value
    return out


@guarded_cluster("slurm")
def collect(
    *, env: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT
) -> ClusterCollected:
    """Ask the Slurm controller (through its client tools) what the cluster is.

    Args:
        env: environment for the tools (e.g. with SLURM_CONF); default the process's own.
    """
    errors: list[CollectorError] = []
    config = parse_config(run_command(["scontrol", "show", "config"], env=env, timeout=timeout))
    release = None
    try:
        nodes, release = parse_sinfo_json(
            run_command(["sinfo", "--json"], env=env, timeout=timeout)
        )
    except (CommandFailed, ValueError, KeyError) as exc:
        # Releases before 21.08 have no --json: text is then the normal way, not a failure.
        # Any other failure (a data_parser whose shape we do not know) is worth recording.
        if not (isinstance(exc, CommandFailed) and "unrecognized option" in exc.output):
            errors.append(
                CollectorError(
                    collector="slurm", message=f"sinfo --json unusable ({exc}); used text"
                )
            )
        nodes = parse_sinfo_text(
            run_command(["sinfo", "-h", "-N", "-o", NODE_FORMAT], env=env, timeout=timeout)
        )
    partitions = parse_partitions(
        run_command(["scontrol", "show", "partition", "--oneliner"], env=env, timeout=timeout)
    )
    readings = cluster_readings(config=config, nodes=nodes, partitions=partitions, release=release)
    return ClusterCollected(cluster=readings, errors=errors)
