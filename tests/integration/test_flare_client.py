"""A FLARE Client API trainer runs unchanged on a real federation (`api: flare`).

examples/flare-numpy/app/client.py is written as FLARE's numpy examples are (`import
nvflare.client as flare`, `flare.init()`, `is_running()`, `receive()`, `send(FLModel(...))`,
`system_info()`, NPConstants, SummaryWriter). One job runs it as two client roles, one
sending FULL updates and one DIFF updates, each weighed by its NUM_STEPS_CURRENT_ROUND;
the model each round is known in advance, so a DIFF applied wrong, a weight ignored or a
round lost shows in the server's result.

The tests share one federation (this module's `federation`): each looks only at its own
job, which has ended before its test returns.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cairn import events as ev
from cairn.client import Client
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.federation import make_federation, started
from tests.integration.cp_helpers import study_events

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "flare-numpy"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFederation]:
    with started(make_federation(tmp_path_factory.mktemp("flare-client"))) as fed:
        yield fed

INITIAL = np.arange(1.0, 10.0).reshape(3, 3)
# full: lr 1.0 weighed 1 step; diff: lr 2.0 weighed 3 steps (job.yaml)
STEP = (1.0 * 1 + 2.0 * 3) / (1 + 3)


async def test_flare_trainer_full_and_diff_updates_aggregate_as_fedavg(
        federation: EmbeddedFederation, client: Client, tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "job")
    job_id = await client.submit(tmp_path / "job" / "job.yaml")
    final = await client.wait(job_id, timeout=120)
    assert final.state == "completed", final
    assert sorted((w.role, w.exit_code) for w in final.workers.values()) == [
        ("diff", 0), ("full", 0), ("server", 0)]
    [result] = [r.value for r in final.results if r.role == "server"]
    rounds = result["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert all(r["sites"] == ["site-a", "site-b"] for r in rounds), rounds
    assert all(r["n_samples"] == 4.0 for r in rounds), rounds  # NUM_STEPS 1 + 3
    np.testing.assert_allclose(result["model"]["numpy_key"], INITIAL + 3 * STEP)
    # The clients' weight_mean, weighed as their updates are, after each round's training.
    for r in rounds:
        full = INITIAL.mean() + (r["round"] - 1) * STEP + 1.0
        diff = INITIAL.mean() + (r["round"] - 1) * STEP + 2.0
        assert r["clients_weight_mean"] == pytest.approx((full * 1 + diff * 3) / 4)

    # SummaryWriter.add_scalar(global_step=current_round) is a worker metric at that step,
    # FLARE's rounds counting from 0.
    events = [e for e in await study_events(federation) if getattr(e, "job", None) == job_id]
    written = sorted((e.role, e.step) for e in events if isinstance(e, ev.WorkerMetric)
                     and set(e.values) == {"weight_mean"})
    assert written == [("diff", 0), ("diff", 1), ("diff", 2),
                       ("full", 0), ("full", 1), ("full", 2)]
    logs = "".join(p.read_text() for p in (federation.site_dir("site-b") / "work").rglob(
        "*.log") if job_id in str(p))
    assert "site-b: round 2 of 3: diff update" in logs, logs


PT_TRAINER = '''\
import torch
import nvflare.client as flare

flare.init()
net = torch.nn.Linear(3, 1, bias=False)
while flare.is_running():
    input_model = flare.receive()
    if not all(isinstance(v, torch.Tensor) for v in input_model.params.values()):
        raise SystemExit(f"not tensors: {input_model.params}")
    net.load_state_dict(input_model.params)
    with torch.no_grad():
        net.weight.add_(1.0)
    flare.send(flare.FLModel(params=net.cpu().state_dict(), metrics={"loss": 0.5},
                             meta={"NUM_STEPS_CURRENT_ROUND": 2}))
'''

PT_JOB = '''\
name: flare-pt
code: ./app
roles:
  server:
    entrypoint: python -m cairn.flare.server
    resources: {cpus: 1, memory: 512Mi}
  client:
    api: flare
    entrypoint: python client.py
    resources: {cpus: 1, memory: 1Gi}
    sites: [site-a, site-b]
params:
  rounds: 3
  min_sites: 2
  round_timeout: 120
  params_format: pytorch
  initial_model: {weight: [[1.0, 2.0, 3.0]]}
timeout: 5m
'''


async def test_a_pytorch_flare_trainer_loads_tensors_unchanged(
        federation: EmbeddedFederation, client: Client, tmp_path: Path) -> None:
    """FLARE's PyTorch trainers `load_state_dict(input_model.params)`: with
    `params_format: pytorch` they are handed tensors, and send their state_dict back."""
    job = tmp_path / "job"
    (job / "app").mkdir(parents=True)
    (job / "app" / "client.py").write_text(PT_TRAINER)
    (job / "job.yaml").write_text(PT_JOB)
    job_id = await client.submit(job / "job.yaml")
    final = await client.wait(job_id, timeout=180)
    assert final.state == "completed", final
    assert sorted((w.role, w.exit_code) for w in final.workers.values()) == [
        ("client", 0), ("client", 0), ("server", 0)]
    [result] = [r.value for r in final.results if r.role == "server"]
    assert [r["sites"] for r in result["rounds"]] == [["site-a", "site-b"]] * 3
    np.testing.assert_allclose(result["model"]["weight"], [[4.0, 5.0, 6.0]], rtol=1e-6)
