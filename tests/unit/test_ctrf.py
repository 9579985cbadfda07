"""CTRF documents: Cairn's statuses mapped onto CTRF's, summaries that add up."""

from __future__ import annotations

import pytest

from cairn.checks import ctrf
from cairn.recipes import ConstraintResult


def _result(status: str, *, optional: bool = False, severity: str = "error") -> ConstraintResult:
    return ConstraintResult(name="GPU.smi.driver", expected=">= 575", actual=None,
                            status=status, message="m", remediation="Install a driver.",  # type: ignore[arg-type]
                            optional=optional, severity=severity)  # type: ignore[arg-type]


@pytest.mark.parametrize(("status", "optional", "severity", "ctrf_status"), [
    ("passed", False, "error", "passed"),
    ("failed", False, "error", "failed"),
    ("missing", False, "error", "failed"),      # missing data is not a pass
    ("missing", True, "error", "skipped"),
    ("failed", True, "error", "failed"),        # optional = may be absent, not "ignore"
    ("error", False, "error", "failed"),
    ("failed", False, "warning", "other"),      # reported, never blocks
])
def test_constraint_statuses(status: str, optional: bool, severity: str,
                             ctrf_status: str) -> None:
    test = ctrf.constraint_test(_result(status, optional=optional, severity=severity),
                                "readiness")
    assert test["status"] == ctrf_status and test["rawStatus"] == status
    assert test["extra"]["remediation"] == "Install a driver."
    assert test["suite"] == "readiness" and test["type"] == "constraint"


def test_a_report_has_the_ctrf_shape_and_a_summary_that_adds_up() -> None:
    tests = [
        ctrf.check_test("cpu-smoke", "passed", phase="readiness", duration_s=1.2345,
                        readings={"cpu-smoke-seconds": 0.1}, job="j-1"),
        ctrf.check_test("gpu-matmul", "skipped", phase="readiness", duration_s=0,
                        message="needs a GPU"),
        ctrf.check_test("nccl", "error", phase="readiness", duration_s=0),
        ctrf.constraint_test(_result("missing"), "readiness"),
    ]
    doc = ctrf.report(tests, start_ms=1000, stop_ms=2500, environment={"site": "site-a"})
    assert doc["reportFormat"] == "CTRF"
    results = doc["results"]
    assert results["tool"] == {"name": "cairn"}
    assert results["summary"] == {"tests": 4, "passed": 1, "failed": 2, "skipped": 1,
                                  "pending": 0, "other": 0, "start": 1000, "stop": 2500}
    assert results["tests"][0]["duration"] == 1234 or results["tests"][0]["duration"] == 1235
    assert results["tests"][0]["extra"] == {"readings": {"cpu-smoke-seconds": 0.1}, "job": "j-1"}
    assert results["tests"][2]["status"] == "failed" and results["tests"][2]["rawStatus"] == "error"
    assert results["environment"] == {"site": "site-a"}
    assert [t["name"] for t in ctrf.failing(doc)] == ["gpu-matmul", "nccl", "GPU.smi.driver"]
