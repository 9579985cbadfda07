"""A recipe's constraints judged on a site's nodes: the one verdict the validator publishes and
offline verification (and eligibility's drift check) re-runs, so the two cannot drift apart.

Each node is judged on the cluster's readings plus its own (the node's win), and what checks
emitted; a constraint's result is its worst node's, naming that node when there are several.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from cairn.recipes.evaluate import ConstraintResult, evaluate_constraint
from cairn.recipes.expressions import Reading
from cairn.recipes.model import Constraint, Recipe
from cairn.snapshot import Snapshot, flatten

_WORSE = {"passed": 0, "missing": 1, "failed": 2, "error": 3}
"""How bad a result is: a node that cannot be evaluated is worse than one that fails."""


def node_readings(snapshot: Snapshot | None) -> dict[str, dict[str, Reading]]:
    """Per node: the cluster's readings plus the node's own (the node's win). A snapshot
    without nodes is judged on its cluster readings; no snapshot at all has no readings
    (and every reading is then missing)."""
    if snapshot is None:
        return {"(no snapshot)": {}}
    cluster = flatten(snapshot.cluster)
    if not snapshot.nodes:
        return {"(cluster)": cluster}
    return {node.node: {**cluster, **flatten(node)} for node in snapshot.nodes}


def judge_on_nodes(constraint: Constraint, nodes: Mapping[str, Mapping[str, Reading]],
                   extra: Mapping[str, Reading]) -> ConstraintResult:
    """The constraint on every node (plus `extra`, readings checks emitted): the worst
    node's result, its message naming the node when there are several."""
    worst: tuple[str, ConstraintResult] | None = None
    for node, readings in nodes.items():
        result = evaluate_constraint(constraint, {**readings, **extra})
        if worst is None or _WORSE[result.status] > _WORSE[worst[1].status]:
            worst = (node, result)
    assert worst is not None  # node_readings never returns an empty mapping
    node, result = worst
    if len(nodes) > 1 and result.status != "passed":
        result = msgspec.structs.replace(result, message=f"node {node}: {result.message}")
    return result


def judge_all_on_nodes(constraints: Sequence[Constraint],
                       nodes: Mapping[str, Mapping[str, Reading]],
                       extra: Mapping[str, Reading]) -> list[ConstraintResult]:
    """`judge_on_nodes` for each constraint, in order."""
    return [judge_on_nodes(c, nodes, extra) for c in constraints]


def phase_constraints(recipe: Recipe, phase: str) -> list[Constraint]:
    """The constraints a phase evaluates: readiness holds the recipe's snapshot constraints
    too, before its own."""
    declared = recipe.validation.get(phase)
    constraints = list(declared.constraints) if declared else []
    return [*recipe.constraints, *constraints] if phase == "readiness" else constraints
