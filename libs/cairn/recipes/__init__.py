"""Recipes: what a site should be. Format, criteria, matching, resolution and evaluation.

The validator's entry points:

    catalog = load_catalog()                       # or load_catalog("path/to/recipes")
    recipe = resolve(catalog, "h100-eks-ubuntu-training")   # or resolve(catalog, Criteria(...))
    results = evaluate_constraints(recipe.constraints, readings)
    results = judge_all_on_nodes(recipe.constraints, node_readings(snapshot), emitted)
    verdict = phase_verdict("readiness", results, checks=[...])
    catalog.checks["nccl-all-reduce-bw"]           # the check catalog (recipes/checks.yaml)
"""

from cairn.recipes.catalog import Catalog, RecipeEntry, default_catalog_dir, load_catalog
from cairn.recipes.checks import CheckDefinition, load_checks, parse_duration
from cairn.recipes.criteria import CriteriaCatalog, load_criteria, parse_assignments
from cairn.recipes.evaluate import (
    CheckOutcome,
    ConstraintResult,
    PhaseVerdict,
    evaluate_constraint,
    evaluate_constraints,
    phase_verdict,
    split_path,
)
from cairn.recipes.expressions import ExpressionError, Reading, parse_expression
from cairn.recipes.matching import match, matches, specificity
from cairn.recipes.model import (
    PHASES,
    Check,
    Component,
    Constraint,
    Criteria,
    PhaseChecks,
    Provenance,
    Recipe,
    RecipeFile,
)
from cairn.recipes.nodes import judge_all_on_nodes, judge_on_nodes, node_readings, phase_constraints
from cairn.recipes.resolve import application_order, base_chain, query_value, resolve
from cairn.recipes.versions import compare_versions, parse_version

__all__ = [
    "PHASES",
    "Catalog",
    "Check",
    "CheckDefinition",
    "CheckOutcome",
    "Component",
    "Constraint",
    "ConstraintResult",
    "Criteria",
    "CriteriaCatalog",
    "ExpressionError",
    "PhaseChecks",
    "PhaseVerdict",
    "Provenance",
    "Reading",
    "Recipe",
    "RecipeEntry",
    "RecipeFile",
    "application_order",
    "base_chain",
    "compare_versions",
    "default_catalog_dir",
    "evaluate_constraint",
    "evaluate_constraints",
    "judge_all_on_nodes",
    "judge_on_nodes",
    "load_catalog",
    "load_checks",
    "load_criteria",
    "match",
    "matches",
    "node_readings",
    "parse_assignments",
    "parse_duration",
    "parse_expression",
    "parse_version",
    "phase_constraints",
    "phase_verdict",
    "query_value",
    "resolve",
    "specificity",
    "split_path",
]
