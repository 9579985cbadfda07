"""Re-running a recipe's constraints against a snapshot, the way the validator judged them.

Verification re-runs every phase's constraints on the bundled snapshot (plus the readings the
bundled CTRF says checks emitted) and compares each outcome with the one the report claims.
Eligibility re-runs the recipe's snapshot constraints on a site's latest snapshot to notice
drift. Both judge per node with the validator's own function (`cairn.recipes.nodes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cairn.checks import ctrf
from cairn.recipes import (
    PHASES,
    ConstraintResult,
    Recipe,
    judge_all_on_nodes,
    judge_on_nodes,
    node_readings,
    phase_constraints,
)
from cairn.snapshot import Reading, Snapshot


@dataclass(frozen=True)
class ConstraintMismatch:
    """A constraint whose re-run outcome differs from the one the report claims."""

    phase: str
    name: str
    claimed: str
    rerun: str
    message: str


def compare_with_report(recipe: Recipe, snapshot: Snapshot | None,
                        reports: Mapping[str, Mapping[str, Any]]) -> list[ConstraintMismatch]:
    """Every constraint whose re-run CTRF status differs from its phase report's (or that the
    report leaves out)."""
    nodes = node_readings(snapshot)
    emitted: dict[str, Reading] = {}
    mismatches: list[ConstraintMismatch] = []
    for phase in [p for p in PHASES if p in reports]:
        tests: Sequence[Mapping[str, Any]] = reports[phase].get("results", {}).get("tests", [])
        for test in tests:
            if test.get("type") == "check":
                emitted.update(test.get("extra", {}).get("readings", {}) or {})
        claimed = {t.get("name"): t.get("status") for t in tests if t.get("type") == "constraint"}
        for constraint in phase_constraints(recipe, phase):
            result = judge_on_nodes(constraint, nodes, emitted)
            rerun = ctrf.constraint_test(result, phase)["status"]
            said = claimed.get(constraint.name, "absent")
            if said != rerun:
                mismatches.append(ConstraintMismatch(phase, constraint.name, str(said), rerun,
                                                     result.message))
    return mismatches


def broken_by(recipe: Recipe, snapshot: Snapshot | None) -> list[ConstraintResult]:
    """The recipe's snapshot constraints that `snapshot` no longer satisfies (blocking ones)."""
    nodes = node_readings(snapshot)
    results = judge_all_on_nodes(recipe.constraints, nodes, {})
    return [r for r in results if r.blocking]
