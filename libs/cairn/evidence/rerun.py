"""Re-running a recipe's constraints against a snapshot, the way the validator judged them.

Verification re-runs every phase's constraints on the bundled snapshot (plus the readings the
bundled CTRF says checks emitted) and compares each outcome with the one the report claims.
Eligibility re-runs the recipe's snapshot constraints on a site's latest snapshot to notice
drift. Both judge per node and keep the worst node, as the validator does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from cairn.checks import ctrf
from cairn.recipes import PHASES, Constraint, ConstraintResult, Recipe, evaluate_constraint
from cairn.snapshot import Reading, Snapshot, flatten

_RANK = {"passed": 0, "missing": 1, "failed": 2, "error": 3}


@dataclass(frozen=True)
class ConstraintMismatch:
    """A constraint whose re-run outcome differs from the one the report claims."""

    phase: str
    name: str
    claimed: str
    rerun: str
    message: str


def node_readings(snapshot: Snapshot | None) -> dict[str, dict[str, Reading]]:
    """Per node: the cluster's readings plus the node's own (the node's win)."""
    if snapshot is None:
        return {"(no snapshot)": {}}
    cluster = flatten(snapshot.cluster)
    if not snapshot.nodes:
        return {"(cluster)": cluster}
    return {node.node: {**cluster, **flatten(node)} for node in snapshot.nodes}


def worst_on_nodes(constraint: Constraint, nodes: Mapping[str, Mapping[str, Reading]],
                   extra: Mapping[str, Reading]) -> ConstraintResult:
    """The constraint on every node; the worst node's result, naming it when there are
    several nodes."""
    worst: tuple[str, ConstraintResult] | None = None
    for node, readings in nodes.items():
        result = evaluate_constraint(constraint, {**readings, **extra})
        if worst is None or _RANK[result.status] > _RANK[worst[1].status]:
            worst = (node, result)
    assert worst is not None  # node_readings never returns an empty mapping
    node, result = worst
    if len(nodes) > 1 and result.status != "passed":
        result = msgspec.structs.replace(result, message=f"node {node}: {result.message}")
    return result


def phase_constraints(recipe: Recipe, phase: str) -> list[Constraint]:
    declared = recipe.validation.get(phase)
    constraints = list(declared.constraints) if declared else []
    return [*recipe.constraints, *constraints] if phase == "readiness" else constraints


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
            result = worst_on_nodes(constraint, nodes, emitted)
            rerun = ctrf.constraint_test(result, phase)["status"]
            said = claimed.get(constraint.name, "absent")
            if said != rerun:
                mismatches.append(ConstraintMismatch(phase, constraint.name, str(said), rerun,
                                                     result.message))
    return mismatches


def broken_by(recipe: Recipe, snapshot: Snapshot | None) -> list[ConstraintResult]:
    """The recipe's snapshot constraints that `snapshot` no longer satisfies (blocking ones)."""
    nodes = node_readings(snapshot)
    results = [worst_on_nodes(c, nodes, {}) for c in recipe.constraints]
    return [r for r in results if r.blocking]
