"""The per-node collection job: `python -m cairn.snapshot.node`.

On Slurm and Kubernetes sites node-level facts come from one such job per node, run through
the site's launcher like any worker (so a GPU node is measured where it is, never guessed from
the node the snapshotter happens to run on). The job prints one line, `CAIRN-SNAPSHOT-NODE`
and the node's readings as JSON; the snapshotter reads it back from the worker's log.
"""

from __future__ import annotations

import os
import sys

import msgspec

from cairn.snapshot.collect import collect_local
from cairn.snapshot.model import NodeSnapshot

MARK = "CAIRN-SNAPSHOT-NODE "


def collect_node(node_name: str | None = None) -> NodeSnapshot:
    """This node's readings only (cluster-level facts come from the scheduler's API)."""
    snap = collect_local(None, node_name=node_name, cluster={})
    return snap.nodes[0]


def parse_lines(text: str) -> list[NodeSnapshot]:
    """Every node snapshot printed in a log (other lines are ignored)."""
    found = []
    for line in text.splitlines():
        if line.startswith(MARK):
            try:
                found.append(msgspec.json.decode(line[len(MARK):], type=NodeSnapshot))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
    return found


def main() -> int:
    node = collect_node(os.environ.get("CAIRN_NODE_NAME") or None)
    sys.stdout.write(MARK + msgspec.json.encode(node).decode() + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
