"""The workflow library on a real federation: the PyTorch digits example over three non-IID
sites with cross-site evaluation, a site's privacy rule enforced (refusing a job that turns
DP off, noising the updates of one that does not), and cyclic weight transfer visiting the
sites in its shuffled order."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from cairn import events as ev
from cairn.cli.jobview import print_job
from cairn.runtime.embedded import EmbeddedFederation
from cairn.spec.workflow import CyclicParams
from cairn.worker.privacy import gaussian_epsilon
from cairn.worker.workflows import Cyclic
from tests.fixtures.federation import connect, make_federation, running, started
from tests.integration.cp_helpers import default_policy, rewrite_runtime, study_events

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"
FEDAVG = REPO / "examples" / "fedavg"
pytestmark = pytest.mark.slow


def _setup_data(example: Path) -> ModuleType:
    """An example's setup_data.py, by path: several examples have one of that name."""
    spec = importlib.util.spec_from_file_location(f"setup_data_{example.name}",
                                                  example / "setup_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _job(tmp_path: Path, example: Path, edit: dict[str, Any]) -> Path:
    job = tmp_path / f"job-{len(list(tmp_path.glob('job-*')))}"
    shutil.copytree(example / "app", job / "app")
    spec = yaml.safe_load((example / "job.yaml").read_text())
    spec.update(edit)
    (job / "job.yaml").write_text(yaml.safe_dump(spec))
    return job / "job.yaml"


def _server_value(job: Any) -> Any:
    values = [r.value for r in job.results if r.role == "server"]
    assert len(values) == 1, job.results
    return values[0]


async def test_digits_cnn_over_three_non_iid_sites_with_cross_site_evaluation(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="the digits example needs torch (make setup)")
    pytest.importorskip("sklearn", reason="the digits example needs scikit-learn (make setup)")
    setup_data = _setup_data(DIGITS)
    sites = ("hub", "site-a", "site-b", "site-c")
    async with running(make_federation(tmp_path, sites)) as fed:
        setup_data.write(fed.dir / "sites", hub=fed.hub)
        client = await connect(fed)
        try:
            # Four rounds, not the example's five: about 95 %, and a CI run under 30 s.
            workflow = {**yaml.safe_load((DIGITS / "job.yaml").read_text())["workflow"],
                        "rounds": 4}
            job_id = await client.submit(_job(tmp_path, DIGITS, {"workflow": workflow}))
            final = await client.wait(job_id, timeout=180)
        finally:
            await client.close()
    assert final.state == "completed", final
    value = _server_value(final)
    assert value["workflow"] == "fedavg"
    assert value["accuracy"][-1] >= 0.90, value["accuracy"]
    matrix = value["cross_site_evaluation"]
    assert matrix["models"] == ["global", "site-a", "site-b", "site-c"]
    assert sorted(matrix["scores"]) == ["site-a", "site-b", "site-c"] and not matrix["missing"]
    for row in matrix["scores"].values():
        assert sorted(row) == sorted(matrix["models"])
        assert all(0.0 <= scores["accuracy"] <= 1.0 for scores in row.values())
    # Non-IID: each site's own model is best on its own data, worse on the others'; the
    # global one does well everywhere.
    for site, row in matrix["scores"].items():
        assert row[site]["accuracy"] > max(matrix["scores"][o][site]["accuracy"]
                                           for o in matrix["scores"] if o != site)
        assert row["global"]["accuracy"] >= 0.85
    print_job(final)
    shown = capsys.readouterr().out
    assert "cross-site evaluation" in shown and "site-c" in shown


@pytest.fixture(scope="module")
def fedavg_fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFederation]:
    """hub, site-a, site-b with the FedAvg example's data; site-a requires DP of study demo."""
    with started(make_federation(tmp_path_factory.mktemp("workflows"))) as fed:
        _setup_data(FEDAVG).write(fed.dir / "sites", hub=fed.hub)
        policy = default_policy(fed, "site-a")
        policy["privacy"] = {"dp": {"clip": 5.0, "noise_multiplier": 0.05, "delta": 1e-5}}
        asyncio.run(rewrite_runtime(fed, "site-a", {"demo": policy}))
        yield fed


async def test_a_sites_privacy_rule_is_enforced(fedavg_fed: EmbeddedFederation,
                                                tmp_path: Path) -> None:
    fed = fedavg_fed
    client = await connect(fed)
    try:
        off = {"workflow": {"name": "fedavg", "rounds": 2, "privacy": {"dp": False}},
               "queue_timeout": "5s"}
        refused = await client.wait(await client.submit(_job(tmp_path, FEDAVG, off)),
                                    timeout=60)
        on = {"workflow": {"name": "fedavg", "rounds": 2}}
        noised = await client.wait(await client.submit(_job(tmp_path, FEDAVG, on)),
                                   timeout=120)
    finally:
        await client.close()
    events = await study_events(fed)
    rejected = [e for e in events if isinstance(e, ev.DeploymentRejected)
                and e.job == refused.job]
    assert [(e.site, e.reason) for e in rejected] == [("site-a", "site-policy")], rejected
    assert "requires differential privacy" in rejected[0].message
    assert "workflow.privacy.dp: false" in rejected[0].message
    assert refused.state != "completed"
    # The other job ran, and site-a's updates were clipped and noised at the site: its agent
    # said so in its acceptance, and the epsilon the site spent is in the server's metrics.
    assert noised.state == "completed", (noised.message, noised.reasons, [
        (k, w.state, w.exit_code, w.cause, w.message) for k, w in noised.workers.items()])
    accepted = {e.site: e for e in events if isinstance(e, ev.DeploymentAccepted)
                and e.job == noised.job}
    assert accepted["site-a"].privacy is not None and accepted["site-a"].privacy.dp is not None
    assert accepted["site-b"].privacy is None
    metrics = [e for e in events if isinstance(e, ev.WorkerMetric) and e.job == noised.job]
    spent = [m.values["dp_epsilon"] for m in metrics if m.site == "site-a"]
    assert spent == pytest.approx([gaussian_epsilon(0.05, r, 1e-5) for r in (1, 2)])
    assert not [m for m in metrics if m.site == "site-b" and "dp_epsilon" in m.values]


async def test_cyclic_visits_the_sites_in_its_order(fedavg_fed: EmbeddedFederation,
                                                    tmp_path: Path) -> None:
    params = {"order": "shuffled", "seed": 1}
    cyclic = {"workflow": {"name": "cyclic", "params": params, "rounds": 4}}
    client = await connect(fedavg_fed)
    try:
        final = await client.wait(await client.submit(_job(tmp_path, FEDAVG, cyclic)),
                                  timeout=120)
    finally:
        await client.close()
    assert final.state == "completed", final.message
    value = _server_value(final)
    assert value["workflow"] == "cyclic"
    visited = [r["sites"] for r in value["rounds"]]
    expected = [Cyclic(CyclicParams(**params)).order(r, ["site-a", "site-b"])
                for r in range(1, 5)]
    assert visited == expected and len({tuple(v) for v in visited}) == 2, visited
