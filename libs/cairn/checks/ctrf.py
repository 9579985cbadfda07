"""Validation results as CTRF (Common Test Report Format, https://ctrf.io) JSON, one per phase.

Every constraint and every check of a phase is one CTRF test; `suite` is the phase, `type` is
`constraint` or `check`, and `extra` carries what CTRF has no field for (expected, actual,
remediation, readings, the job that ran a check). CTRF knows passed, failed, skipped, pending
and other; Cairn's own status is kept in `rawStatus`:

| Cairn | CTRF |
|---|---|
| constraint passed / failed | passed / failed |
| constraint missing (required) | failed: missing data is not a pass |
| constraint missing (optional) | skipped |
| constraint error | failed |
| warning that did not hold | other: reported, never blocks |
| check passed / failed / skipped | passed / failed / skipped |
| check error | failed |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cairn.recipes import ConstraintResult

SPEC_VERSION = "0.0.0"
STATUSES = ("passed", "failed", "skipped", "pending", "other")


def constraint_test(result: ConstraintResult, phase: str) -> dict[str, Any]:
    """One constraint result as a CTRF test."""
    if result.status == "passed":
        status = "passed"
    elif result.severity == "warning":
        status = "other"
    elif result.status == "missing" and result.optional:
        status = "skipped"
    else:
        status = "failed"
    extra: dict[str, Any] = {"expected": result.expected, "actual": result.actual,
                             "severity": result.severity, "optional": result.optional}
    if result.remediation:
        extra["remediation"] = result.remediation
    return {"name": result.name, "status": status, "rawStatus": result.status, "duration": 0,
            "message": result.message, "suite": phase, "type": "constraint", "extra": extra}


def check_test(name: str, status: str, *, phase: str, duration_s: float, message: str = "",
               readings: Mapping[str, Any] | None = None, job: str | None = None,
               details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One check's combined result as a CTRF test."""
    extra: dict[str, Any] = {"readings": dict(readings or {})}
    if job:
        extra["job"] = job
    if details:
        extra["details"] = dict(details)
    return {"name": name, "status": status if status in STATUSES else "failed",
            "rawStatus": status, "duration": round(duration_s * 1000),
            "message": message, "suite": phase, "type": "check", "extra": extra}


def summary(tests: Sequence[Mapping[str, Any]], start_ms: int, stop_ms: int) -> dict[str, int]:
    counts = {s: sum(1 for t in tests if t["status"] == s) for s in STATUSES}
    return {"tests": len(tests), **counts, "start": start_ms, "stop": stop_ms}


def report(tests: Sequence[Mapping[str, Any]], *, start_ms: int, stop_ms: int,
           environment: Mapping[str, Any] | None = None,
           tool_version: str | None = None) -> dict[str, Any]:
    """A whole CTRF document for one phase."""
    tool: dict[str, Any] = {"name": "cairn"}
    if tool_version:
        tool["version"] = tool_version
    results: dict[str, Any] = {"tool": tool, "summary": summary(tests, start_ms, stop_ms),
                               "tests": [dict(t) for t in tests]}
    if environment:
        results["environment"] = dict(environment)
    return {"reportFormat": "CTRF", "specVersion": SPEC_VERSION, "results": results}


def failing(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tests of a CTRF document that keep its phase from passing."""
    tests: list[dict[str, Any]] = doc.get("results", {}).get("tests", [])
    return [t for t in tests if t["status"] in ("failed", "skipped", "pending")]
