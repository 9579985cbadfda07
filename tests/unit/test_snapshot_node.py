"""The per-node collection job's output and how the snapshotter reads it back."""

from __future__ import annotations

import socket

import msgspec

from cairn.snapshot.node import MARK, collect_node, parse_lines
from cairn.snapshotter.nodejobs import expected_nodes, request


def test_a_node_job_prints_one_line_the_snapshotter_reads_back() -> None:
    node = collect_node("gpu-7")
    log = "\n".join(["starting", MARK + msgspec.json.encode(node).decode(), "bye",
                     MARK + "{not json"])
    assert parse_lines(log) == [node]
    assert node.node == "gpu-7" and node.measurements.get("OS")


def test_expected_nodes_are_the_schedulers_else_this_machine() -> None:
    assert expected_nodes([]) == [socket.gethostname()]
    assert expected_nodes(["n2", "n1", "n2"]) == ["n1", "n2"]


def test_one_pinned_role_per_node() -> None:
    job = request("site-a", ["n1", "n2", "n3"])
    assert [r.name for r in job.roles] == ["node-0", "node-1", "node-2"]
    assert all(r.sites == ["site-a"] and r.min_sites == 1 for r in job.roles)
    assert job.params == {"nodes": ["n1", "n2", "n3"]}
