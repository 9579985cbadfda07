"""Constraint evaluation and phase verdicts: missing data is never a pass."""

from __future__ import annotations

import pytest

from cairn.recipes import (
    CheckOutcome,
    Constraint,
    Reading,
    evaluate_constraint,
    evaluate_constraints,
    phase_verdict,
    split_path,
)

READINGS: dict[str, Reading] = {
    "OS.release.ID": "ubuntu",
    "OS.sysctl./proc/sys/kernel/osrelease": "6.8.0-1024-aws",
    "K8s.server.version": "v1.32.4-eks-abc",
    "Memory.info.total-bytes": 8 * 2**30,
    "Container.docker.runtimes": ["runc", "nvidia"],
}


@pytest.mark.parametrize(
    ("name", "value", "status"),
    [
        ("OS.release.ID", "ubuntu", "passed"),
        ("OS.release.ID", "in [rhel, sles]", "failed"),
        ("OS.sysctl./proc/sys/kernel/osrelease", ">= 6.8", "passed"),
        ("K8s.server.version", ">= 1.32.4", "passed"),
        ("K8s.server.version", ">= 1.34", "failed"),
        ("Memory.info.total-bytes", ">= 1GiB", "passed"),
        ("Container.docker.runtimes", "nvidia", "passed"),
        ("GPU.smi.driver", ">= 575.57.08", "missing"),
        ("Container.docker.runtimes", ">= 1", "error"),
    ],
)
def test_statuses(name: str, value: str, status: str) -> None:
    result = evaluate_constraint(Constraint(name=name, value=value), READINGS)
    assert result.status == status
    assert result.expected == value
    assert result.actual == READINGS.get(name)


def test_missing_data_blocks_the_phase() -> None:
    # AICR #1337: an absent measurement counted as passed. Here it must not.
    results = evaluate_constraints([Constraint(name="GPU.smi.driver", value=">= 575")], {})
    assert results[0].status == "missing"
    verdict = phase_verdict("readiness", results)
    assert not verdict.passed and verdict.status == "failed"
    assert "GPU.smi.driver" in verdict.reasons[0]


def test_optional_missing_does_not_block_but_optional_wrong_does() -> None:
    optional = Constraint(name="OS.kmod.nvidia_peermem", value="true", optional=True)
    missing = evaluate_constraints([optional], {})
    assert missing[0].status == "missing" and not missing[0].blocking
    assert phase_verdict("readiness", missing).passed
    wrong = evaluate_constraints([optional], {"OS.kmod.nvidia_peermem": False})
    assert wrong[0].status == "failed" and wrong[0].blocking
    assert not phase_verdict("readiness", wrong).passed


def test_warning_is_reported_but_never_blocks() -> None:
    warning = Constraint(name="OS.release.ID", value="rhel", severity="warning")
    results = evaluate_constraints([warning], READINGS)
    assert results[0].status == "failed"
    assert phase_verdict("readiness", results).passed


@pytest.mark.parametrize(
    ("checks", "passed"),
    [
        ([CheckOutcome(name="gpu-matmul", status="passed")], True),
        ([CheckOutcome(name="gpu-matmul", status="skipped")], False),
        ([CheckOutcome(name="gpu-matmul", status="failed", message="412 < 550")], False),
        ([CheckOutcome(name="a", status="passed"), CheckOutcome(name="b", status="error")], False),
    ],
)
def test_checks_decide_the_phase(checks: list[CheckOutcome], passed: bool) -> None:
    ok = evaluate_constraints([Constraint(name="OS.release.ID", value="ubuntu")], READINGS)
    assert phase_verdict("performance", ok, checks).passed is passed


def test_only_skipped_checks_never_pass() -> None:
    verdict = phase_verdict("performance", [], [CheckOutcome(name="x", status="skipped")])
    assert not verdict.passed


def test_empty_phase_is_skipped_not_passed() -> None:
    verdict = phase_verdict("conformance", [], [])
    assert verdict.status == "skipped" and not verdict.passed


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("OS.sysctl./proc/sys/kernel/osrelease", ("OS", "sysctl", "/proc/sys/kernel/osrelease")),
        ("GPU.smi.gpu.model", ("GPU", "smi", "gpu.model")),
        ("K8s.server.version", ("K8s", "server", "version")),
        ("nccl-all-reduce-bw", None),
    ],
)
def test_split_path(name: str, parts: tuple[str, str, str] | None) -> None:
    assert split_path(name) == parts
