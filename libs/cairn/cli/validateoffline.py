"""`cairn validate --snapshot FILE --recipe FILE|NAME`: a recipe's constraints against a
snapshot file, with no federation, like `aicr validate` without a cluster.

The verdict is the one the validator publishes for its readiness phase and offline
verification re-runs (`cairn.recipes.nodes`): every constraint on every node of the snapshot,
the worst node counting, and a missing reading is not a pass. The other phases need checks
run on the cluster; they are listed as not run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import msgspec

from cairn.cli.output import Column, emit, print_table
from cairn.recipes.aicr.convert import constraints_of, read_recipe_source, result_of
from cairn.recipes.aicr.model import PHASES, RecipeResult
from cairn.recipes.aicr.snapshots import read_snapshot
from cairn.recipes.evaluate import PhaseVerdict, phase_verdict
from cairn.recipes.nodes import judge_all_on_nodes, node_readings


def _recipe(recipe: str, catalog_dir: str | None) -> tuple[RecipeResult, str]:
    path = Path(recipe)
    if path.is_file() or "/" in recipe or recipe.endswith((".yaml", ".yml", ".json")):
        return read_recipe_source(path)[0], str(path)
    from cairn.cli.recipe import recipe_named
    from cairn.recipes import load_catalog, resolve

    catalog = load_catalog(Path(catalog_dir) if catalog_dir else None)
    name = recipe_named(catalog, recipe)
    return result_of(resolve(catalog, name)), name


def _phase(verdict: PhaseVerdict) -> dict[str, Any]:
    """A phase as an online run's `-o json` shows it (counts, reasons), with each
    constraint's detail beside."""
    constraints = msgspec.to_builtins(verdict.constraints)
    statuses = [c["status"] for c in constraints]
    return {"status": verdict.status, "passed": statuses.count("passed"),
            "failed": sum(1 for s in statuses if s not in ("passed", "skipped")),
            "skipped": statuses.count("skipped"), "reasons": list(verdict.reasons),
            "constraints": constraints}


def validate_offline(snapshot: Path, recipe: str, catalog_dir: str | None,
                     output: str) -> None:
    result, shown = _recipe(recipe, catalog_dir)
    snap = read_snapshot(snapshot)
    constraints = [*constraints_of(result), *constraints_of(result, "readiness")]
    judged = judge_all_on_nodes(constraints, node_readings(snap), {})
    verdict = phase_verdict("readiness", judged)
    not_run = {}
    for phase in PHASES[1:]:
        declared = getattr(result.validation, phase) if result.validation else None
        if declared is not None:
            not_run[phase] = {"status": "not-run", "checks": list(declared.checks),
                              "constraints": [c.name for c in declared.constraints],
                              "reason": "needs checks run on the cluster"}
    data: dict[str, Any] = {
        # The same shape as an online run's `-o json` (cairn.client.validation's
        # ValidationResult), with no run id and no site: nothing ran anywhere.
        "run": "offline", "site": "", "recipe": shown, "snapshot": str(snapshot),
        "offline": True,
        "nodes": sorted(n.node for n in snap.nodes), "status": verdict.status,
        "phases": {"readiness": _phase(verdict), **not_run}}

    def table(d: dict[str, Any]) -> None:
        ready = d["phases"]["readiness"]
        print_table(f"readiness: {ready['status']}",
                    [Column("constraint", keep=True), Column("expected"),
                     Column("actual", wrap=True), Column("status", keep=True),
                     Column("detail", wrap=True)],
                    [[c["name"], c["expected"], "" if c["actual"] is None else str(c["actual"]),
                      c["status"], c["message"]] for c in ready["constraints"]])
        for phase, body in d["phases"].items():
            if phase != "readiness":
                click.echo(f"{phase}: not run offline ({body['reason']}: "
                           f"{', '.join(body['checks']) or 'no checks'})")
        click.echo(f"{d['recipe']} against {d['snapshot']}: {d['status']}")

    emit(data, output, table)
    if verdict.status != "passed":
        raise SystemExit(1)
