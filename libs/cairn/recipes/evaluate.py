"""Constraint evaluation and phase verdicts.

Missing data is never a pass (AICR issue #1337 let an absent measurement count as passed): a
constraint whose reading is absent gets status `missing`, which blocks its phase unless the
constraint is `optional`. `optional` means "this measurement may be absent", not "ignore
this": an optional constraint whose reading is present and wrong still fails. A constraint of
severity `warning` is reported but never blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import msgspec

from cairn.recipes.expressions import ExpressionError, Reading, parse_expression
from cairn.recipes.model import Constraint

ConstraintStatus = Literal["passed", "failed", "missing", "error"]
CheckStatus = Literal["passed", "failed", "skipped", "error"]


class ConstraintResult(msgspec.Struct, kw_only=True, frozen=True):
    """The outcome of one constraint against one set of readings."""

    name: str
    """Measurement path (`Type.Subtype.Key`) or phase constraint name."""
    expected: str
    """The constraint's expression, as written."""
    actual: Reading | None
    """The reading found, or None when it was missing."""
    status: ConstraintStatus
    """passed, failed (evaluated false), missing (no reading) or error (cannot evaluate)."""
    message: str
    """One line for people saying why."""
    remediation: str = ""
    severity: Literal["error", "warning"] = "error"
    optional: bool = False

    @property
    def blocking(self) -> bool:
        """True when this result keeps its phase from passing."""
        if self.severity != "error" or self.status == "passed":
            return False
        return not (self.status == "missing" and self.optional)


class CheckOutcome(msgspec.Struct, kw_only=True, frozen=True):
    """What a validator reports for one check it ran (or did not run)."""

    name: str
    status: CheckStatus
    message: str = ""


class PhaseVerdict(msgspec.Struct, kw_only=True, frozen=True):
    """A phase's result: it passes only when nothing blocks and at least one thing ran."""

    phase: str
    passed: bool
    status: Literal["passed", "failed", "skipped"]
    """skipped: the phase had nothing to evaluate (no constraints, no checks)."""
    reasons: list[str]
    """Why it did not pass (empty when it passed)."""
    constraints: list[ConstraintResult]
    checks: list[CheckOutcome]


def split_path(name: str) -> tuple[str, str, str] | None:
    """Split `Type.Subtype.Key` on the first two dots (keys may hold dots and slashes).

    `OS.sysctl./proc/sys/kernel/osrelease` -> ("OS", "sysctl", "/proc/sys/kernel/osrelease").
    Returns None for a name that is not a measurement path (a phase constraint name).
    """
    parts = name.split(".", 2)
    if len(parts) != 3 or not all(parts):
        return None
    return parts[0], parts[1], parts[2]


def evaluate_constraint(
    constraint: Constraint, readings: Mapping[str, Reading]
) -> ConstraintResult:
    """Evaluate one constraint against `readings` (keyed by measurement path or name)."""
    actual = readings.get(constraint.name)

    def result(status: ConstraintStatus, message: str) -> ConstraintResult:
        return ConstraintResult(
            name=constraint.name,
            expected=constraint.value,
            actual=actual,
            status=status,
            message=message,
            remediation=constraint.remediation,
            severity=constraint.severity,
            optional=constraint.optional,
        )

    if actual is None:
        why = "optional, not reported" if constraint.optional else "no reading: not a pass"
        return result("missing", f"{constraint.name} was not measured ({why})")
    try:
        expression = parse_expression(constraint.value)
        ok = expression.holds(actual)
    except ExpressionError as exc:
        return result("error", f"cannot evaluate {constraint.value!r}: {exc}")
    if ok:
        return result("passed", f"{_show(actual)} satisfies {constraint.value}")
    return result("failed", f"{_show(actual)} does not satisfy {constraint.value}")


def evaluate_constraints(
    constraints: Iterable[Constraint], readings: Mapping[str, Reading]
) -> list[ConstraintResult]:
    """Evaluate every constraint, in the order given."""
    return [evaluate_constraint(c, readings) for c in constraints]


def phase_verdict(
    phase: str, constraints: Sequence[ConstraintResult], checks: Sequence[CheckOutcome] = ()
) -> PhaseVerdict:
    """Decide a phase: passed only if no constraint blocks and every check passed.

    A skipped check fails the phase: a check that did not run proves nothing. A phase with
    nothing in it is `skipped`, which is not a pass either.
    """
    reasons = [f"constraint {r.name}: {r.status}: {r.message}" for r in constraints if r.blocking]
    reasons += [
        f"check {c.name}: {c.status}" + (f": {c.message}" if c.message else "")
        for c in checks
        if c.status != "passed"
    ]
    if not constraints and not checks:
        return PhaseVerdict(
            phase=phase,
            passed=False,
            status="skipped",
            reasons=["nothing to evaluate"],
            constraints=[],
            checks=[],
        )
    passed = not reasons
    return PhaseVerdict(
        phase=phase,
        passed=passed,
        status="passed" if passed else "failed",
        reasons=reasons,
        constraints=list(constraints),
        checks=list(checks),
    )


def _show(value: Reading) -> str:
    return repr(value) if isinstance(value, str) else str(value)
