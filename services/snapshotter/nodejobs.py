"""Node-level facts through collection jobs: one job worker per node, run by the site's
launcher under the reserved study `validation`, each printing its node's readings
(`python -m cairn.snapshot.node`). A node that was expected and did not report is an error
in the snapshot, never a node that silently went missing.
"""

from __future__ import annotations

import logging
import socket

from cairn.bus import Bus
from cairn.client import Client
from cairn.client.jobrequest import JobRequest
from cairn.errors import CairnError, Unavailable
from cairn.events import Resources, RoleRequest
from cairn.runtime.seed import project_admin
from cairn.snapshot.model import CollectorError, NodeSnapshot
from cairn.snapshot.node import parse_lines
from cairn.spec.runtime import VALIDATION_STUDY

log = logging.getLogger("cairn.snapshotter")

ENTRYPOINT = "python -m cairn.snapshot.node"
RESOURCES = Resources(gpus=0, millicpus=250, memory_bytes=256 * 1024 * 1024)
TIMEOUT_S = 60.0
QUEUE_TIMEOUT_S = 120.0


def request(site: str, nodes: list[str]) -> JobRequest:
    """One role per node, each pinned to the site (a Slurm or Kubernetes backend places a
    role's worker on its node; the process backend has one node, this machine)."""
    roles = [RoleRequest(name=f"node-{i}", entrypoint=ENTRYPOINT, resources=RESOURCES,
                         sites=[site], min_sites=1) for i in range(len(nodes))]
    return JobRequest(name="snapshot-nodes", roles=roles, params={"nodes": nodes},
                      timeout_s=TIMEOUT_S, queue_timeout_s=QUEUE_TIMEOUT_S)


async def collect_nodes(bus: Bus, site: str, nodes: list[str], actor: str | None
                        ) -> tuple[list[NodeSnapshot], list[CollectorError]]:
    """Run the collection job; returns the nodes that reported and an error per node that
    did not."""
    actor = actor or await project_admin(bus)
    if actor is None:
        raise Unavailable("collection jobs need an actor: -O actor=NAME or a seeded federation")
    client = Client(bus, study=VALIDATION_STUDY, actor=actor)
    errors: list[CollectorError] = []
    reported: list[NodeSnapshot] = []
    try:
        job = await client.submit_request(request(site, nodes), study=VALIDATION_STUDY)
        final = await client.wait(job, timeout=TIMEOUT_S + QUEUE_TIMEOUT_S + 30)
        logs: dict[tuple[str, int], list[bytes]] = {}
        async for chunk in client.logs(job, site):
            logs.setdefault((chunk.role, chunk.rank), []).append(chunk.data)
        for parts in logs.values():
            reported.extend(parse_lines(b"".join(parts).decode("utf-8", "replace")))
        outcome = f"job {job} {final.state}" + (f" ({final.cause})" if final.cause else "")
    except CairnError as exc:
        outcome = f"collection job failed: {exc}"
    seen = {n.node for n in reported}
    for node in nodes:
        if node not in seen:
            errors.append(CollectorError(collector="node-job",
                                         message=f"node {node} did not report: {outcome}"))
    log.info("collection job on %s: %d of %d nodes reported", site, len(seen & set(nodes)),
             len(nodes))
    return reported, errors


def expected_nodes(scheduler_nodes: list[str]) -> list[str]:
    """The nodes to measure: those the scheduler's API lists, else this machine."""
    return sorted(set(scheduler_nodes)) or [socket.gethostname()]
