"""The validator's pure parts: which phases run, constraints across nodes, verdicts, and the
job a check becomes."""

from __future__ import annotations

from cairn.recipes import (
    Check,
    Constraint,
    judge_all_on_nodes,
    load_catalog,
    node_readings,
    resolve,
)
from cairn.snapshot import make_snapshot
from cairn.validator import phases
from cairn.validator.checkjobs import job_request, wants_gpus


def test_readiness_holds_the_snapshot_constraints_and_phases_keep_their_order() -> None:
    catalog = load_catalog()
    plan = phases.plan(resolve(catalog, "slurm-h100"))
    assert [p.phase for p in plan] == ["readiness", "deployment", "conformance", "performance"]
    readiness = {c.name for c in plan[0].constraints}
    assert {"GPU.smi.driver", "Slurm.cluster.version", "accelerator-count"} <= readiness
    assert {c.name for c in plan[0].checks} == {"accelerator-discovery", "cpu-smoke"}
    cpu = phases.plan(resolve(catalog, "cpu-linux-process"))
    assert [p.phase for p in cpu] == ["readiness"]
    assert {c.name for c in cpu[0].checks} == {"accelerator-discovery", "cpu-smoke"}


def test_a_constraint_must_hold_on_every_node_and_says_which_failed() -> None:
    snap = make_snapshot(site="s", cluster={"Slurm.cluster.version": "23.11"},
                         nodes={"n1": {"GPU.smi.driver": "580.1"}, "n2": {}})
    nodes = node_readings(snap)
    assert nodes["n1"]["Slurm.cluster.version"] == "23.11"  # cluster facts reach every node
    results = judge_all_on_nodes(
        [Constraint(name="GPU.smi.driver", value=">= 575"),
         Constraint(name="Slurm.cluster.version", value=">= 22.05"),
         Constraint(name="accelerator-count", value=">= 1")],
        nodes, {"accelerator-count": 8})
    assert [r.status for r in results] == ["missing", "passed", "passed"]
    assert results[0].message.startswith("node n2:")
    assert node_readings(None) == {"(no snapshot)": {}}


def test_a_skipped_check_keeps_a_phase_from_passing() -> None:
    ok = phases.CheckRun(name="cpu-smoke", status="passed")
    skipped = phases.CheckRun(name="gpu-matmul", status="skipped", message="needs a GPU")
    assert phases.verdict("performance", [], [ok]).passed
    judged = phases.verdict("performance", [], [ok, skipped])
    assert not judged.passed and judged.reasons == ["check gpu-matmul: skipped: needs a GPU"]
    assert phases.verdict("deployment", [], []).status == "skipped"


def test_a_check_becomes_a_job_in_the_validation_study_shape() -> None:
    gang = job_request(Check(name="gang-start", with_={"window_s": 5}), needs_gpu=False,
                       site="site-a", site_gpus=8, timeout_s=600, run="v-1")
    assert [r.name for r in gang.roles] == ["rank-0", "rank-1"]
    assert all(r.sites == ["site-a"] and r.resources.gpus == 0 for r in gang.roles)
    assert gang.roles[0].entrypoint == "python -m cairn.checks gang-start"
    assert gang.params["ranks"] == 2 and gang.params["with"] == {"window_s": 5}
    matmul = job_request(Check(name="gpu-matmul"), needs_gpu=True, site="site-a", site_gpus=8,
                         timeout_s=600, run="v-1")
    assert [r.name for r in matmul.roles] == ["check"] and matmul.roles[0].resources.gpus == 8
    assert wants_gpus("accelerator-discovery", False, 4) == 4
    assert wants_gpus("cpu-smoke", False, 4) == 0
