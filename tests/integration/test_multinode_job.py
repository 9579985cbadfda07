"""A worker that spans nodes, end to end: `resources: {nodes: 2}` in a job spec reaches the
Slurm site's batch job (a rank per node, its GPUs on each), and a site whose backend is not
multi-node refuses it, naming the capability."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cairn import events as ev
from tests.fixtures.federation import connect, make_federation
from tests.fixtures.slurm_lab import SlurmLab
from tests.integration.cp_helpers import default_policy, rewrite_runtime, study_events

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

SCRIPT = """\
import os
print("node", os.environ.get("SLURMD_NODENAME"), "rank", os.environ.get("CAIRN_NODE_RANK"),
      "of", os.environ.get("WORLD_SIZE"), "gpus", os.environ.get("CUDA_VISIBLE_DEVICES"),
      flush=True)
"""


def job(tmp: Path, site: str, gpus: int) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "app").mkdir(exist_ok=True)
    (tmp / "app" / "main.py").write_text(SCRIPT)
    spec = tmp / f"job-{site}.yaml"
    spec.write_text(textwrap.dedent(f"""\
        name: two-nodes
        code: ./app
        roles:
          trainer:
            entrypoint: python main.py
            resources: {{gpus: {gpus}, cpus: 500m, memory: 256Mi, nodes: 2}}
            sites: [{site}]
        timeout: 5m
        queue_timeout: 2m
        """))
    return spec


async def test_a_two_node_worker_runs_on_slurm_and_is_refused_elsewhere(
        slurm_lab: SlurmLab, tmp_path: Path) -> None:
    fed = make_federation(tmp_path, ("hub", "site-a", "site-b"))
    fed.backends.update({"site-a": "slurm"})
    fed.site_settings.update({"site-a": {
        "slurm": {"driver": "cli", "slurm_conf": str(slurm_lab.conf), "poll": 0.2},
        "inventory": {"gpus": 4, "cpus": 4, "memory": "8Gi"},
        "gpu_ids": [0, 1, 2, 3]}})
    fed.start()
    try:
        await fed.wait_healthy(60)
        policy = default_policy(fed, "site-a")
        policy["limits"] = {**policy.get("limits", {}), "gpus": 4}
        await rewrite_runtime(fed, "site-a", {"demo": policy})
        client = await connect(fed)
        try:
            on_slurm = await client.submit(job(tmp_path / "job", "site-a", gpus=1))
            final = await client.wait(on_slurm, timeout=180)
            log = b"".join([c.data async for c in client.logs(on_slurm)]).decode()
            on_process = await client.submit(job(tmp_path / "job", "site-b", gpus=0))
            refused = await client.wait(on_process, timeout=120)
        finally:
            await client.close()
        events = await study_events(fed, job=on_process)
    finally:
        fed.stop()
    assert final.state == "completed", (final.cause, final.message, log)
    lines = sorted(line for line in log.splitlines() if line.startswith("node "))
    words = [line.split() for line in lines]
    # One rank per node, on two different nodes of the lab, each with its own GPU.
    assert sorted(w[3] for w in words) == ["0", "1"] and len({w[1] for w in words}) == 2, log
    assert {w[1][-2:] for w in words} == {"n1", "n2"}, log
    assert all(w[5] == "2" and w[7] not in ("None", "") for w in words), log
    # site-b's process backend cannot span nodes: refused at its agent, the capability named.
    assert refused.state in ("failed", "unschedulable"), refused
    rejected = [e for e in events if isinstance(e, ev.DeploymentRejected)]
    assert rejected and rejected[0].missing_capability == "multi-node"
    assert "spans 2 nodes" in rejected[0].message
