"""Judging a phase: its plan, the verdict on its checks and constraints (each judged on every
node by `cairn.recipes.judge_on_nodes`, the function verification re-runs), its CTRF document.

Pure functions of their inputs (no clock, no I/O), so the validator's decisions are tested
without a bus.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cairn.checks import ctrf
from cairn.recipes import (
    PHASES,
    Check,
    CheckOutcome,
    Constraint,
    ConstraintResult,
    PhaseVerdict,
    Recipe,
    phase_constraints,
    phase_verdict,
)


@dataclass(frozen=True)
class PhasePlan:
    """What one phase evaluates: readiness also holds the recipe's snapshot constraints."""

    phase: str
    constraints: list[Constraint]
    checks: list[Check]


@dataclass(frozen=True)
class CheckRun:
    """One check's combined result, as the validator saw it."""

    name: str
    status: str
    message: str = ""
    readings: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    job: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def plan(recipe: Recipe) -> list[PhasePlan]:
    """The phases to run, in order: readiness whenever there is anything to test in it."""
    out: list[PhasePlan] = []
    for phase in PHASES:
        declared = recipe.validation.get(phase)
        constraints = phase_constraints(recipe, phase)
        checks = list(declared.checks) if declared else []
        if constraints or checks or declared is not None:
            out.append(PhasePlan(phase, constraints, checks))
    return out


def verdict(phase: str, results: Sequence[ConstraintResult],
            runs: Sequence[CheckRun]) -> PhaseVerdict:
    """The phase's verdict: a skipped or broken check never lets it pass."""
    outcomes = [CheckOutcome(name=r.name, status=_outcome(r.status), message=r.message)
                for r in runs]
    return phase_verdict(phase, results, outcomes)


def _outcome(status: str) -> Any:
    return status if status in ("passed", "failed", "skipped", "error") else "error"


def phase_report(phase: str, results: Sequence[ConstraintResult], runs: Sequence[CheckRun], *,
                 start_ms: int, stop_ms: int, environment: Mapping[str, Any]) -> dict[str, Any]:
    """The phase's CTRF document: checks first (they ran first), then constraints."""
    tests = [ctrf.check_test(r.name, r.status, phase=phase, duration_s=r.duration_s,
                             message=r.message, readings=r.readings, job=r.job,
                             details=r.details) for r in runs]
    tests += [ctrf.constraint_test(r, phase) for r in results]
    return ctrf.report(tests, start_ms=start_ms, stop_ms=stop_ms,
                       environment={**environment, "phase": phase})
