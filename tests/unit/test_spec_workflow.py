"""`workflow:` in job.yaml: chosen by name, every parameter declared, every error located."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.client.jobrequest import request_of_spec
from cairn.errors import InvalidInput
from cairn.events.workflow import DPRule, PrivacyRule
from cairn.spec.job import parse_job_spec
from cairn.spec.workflow import WORKFLOWS
from cairn.worker.workflows import make_workflow

HEAD = """\
name: fl
code: ./app
roles:
  server: {entrypoint: python -m app.server}
  client: {entrypoint: python -m app.client, min_sites: 2}
"""


def _spec(tmp_path: Path, workflow: str, head: str = HEAD) -> object:
    (tmp_path / "app").mkdir(exist_ok=True)
    return parse_job_spec(head + workflow, "job.yaml", tmp_path)


def test_a_workflow_with_its_parameters_and_privacy_reaches_the_request(tmp_path: Path) -> None:
    spec = _spec(tmp_path, """\
workflow:
  name: fedadam
  params: {server_lr: 0.05, beta_1: 0.8}
  rounds: 7
  min_sites: 2
  round_timeout: 2m
  cross_site_eval: true
  privacy:
    dp: {clip: 1.5, noise_multiplier: 0.9}
    exclude: ["bn.*"]
""")
    workflow = spec.workflow  # type: ignore[attr-defined]
    assert workflow.name == "fedadam" and workflow.rounds == 7 and workflow.min_sites == 2
    assert workflow.params == {"server_lr": 0.05, "beta_1": 0.8, "beta_2": 0.99, "tau": 1e-9}
    assert workflow.round_timeout_s == 120.0 and workflow.cross_site_eval
    assert workflow.privacy == PrivacyRule(dp=DPRule(clip=1.5, noise_multiplier=0.9),
                                           exclude=["bn.*"])
    assert request_of_spec(spec, "d" * 64).workflow == workflow  # type: ignore[arg-type]
    made = make_workflow(workflow.name, workflow.params)
    assert made.describe() == {"name": "fedadam", "params": workflow.params}


def test_dp_false_is_recorded_as_turned_off(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "workflow: {name: fedavg, privacy: {dp: false}}\n")
    assert spec.workflow.privacy == PrivacyRule(dp_off=True)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("text", "field", "problem"), [
    ("workflow: {name: fedsgd}", "workflow.name", "unknown workflow 'fedsgd'"),
    ("workflow: {name: fedprox, params: {mu: -1}}", "workflow.params.mu", "outside"),
    ("workflow: {name: fedprox, params: {nu: 1}}", "workflow.params.nu", "unknown field"),
    ("workflow: {name: fedavg, params: {mu: 1}}", "workflow.params.mu", "unknown field"),
    ("workflow: {name: trimmed-mean, params: {beta: 0.5}}", "workflow.params.beta", "outside"),
    ("workflow: {name: cyclic, params: {order: random}}", "workflow.params.order", ""),
    ("workflow: {name: fedavg, rounds: 0}", "workflow.rounds", "between 1"),
    ("workflow: {name: fedavg, round_timeout: soon}", "workflow.round_timeout", ""),
    ("workflow: {name: fedavg, min_sites: 0}", "workflow.min_sites", "1 or more"),
    ("workflow: {name: fedavg, privacy: {dp: true}}", "workflow.privacy.dp", "dp: false"),
    ("workflow: {name: fedavg, rounds_: 2}", "workflow.rounds_", "unknown field"),
])
def test_a_bad_workflow_is_refused_naming_its_field(tmp_path: Path, text: str, field: str,
                                                    problem: str) -> None:
    with pytest.raises(InvalidInput) as info:
        _spec(tmp_path, text + "\n")
    assert info.value.field == field, info.value
    assert problem in info.value.message
    assert info.value.file == "job.yaml" and info.value.line == 6


def test_a_workflow_needs_a_server_role(tmp_path: Path) -> None:
    head = "name: fl\ncode: ./app\nroles:\n  trainer: {entrypoint: python x.py}\n"
    with pytest.raises(InvalidInput, match="'server' role"):
        _spec(tmp_path, "workflow: {name: fedavg}\n", head)


def test_every_declared_workflow_can_be_made() -> None:
    for name in WORKFLOWS:
        assert make_workflow(name).name == name
