"""Benchmark recipe matching and constraint evaluation on a generated 10,000-recipe catalog.

Run: `.venv/bin/python tools/bench_recipes.py`. Targets: median `match` under 10 ms.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

import msgspec

from cairn.recipes import (
    Catalog,
    Constraint,
    Criteria,
    Reading,
    RecipeFile,
    evaluate_constraints,
    load_checks,
    load_criteria,
    match,
)
from cairn.recipes.catalog import RecipeEntry
from cairn.recipes.model import CRITERIA_FIELDS

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


def _catalog(count: int, rnd: random.Random) -> Catalog:
    criteria = load_criteria(RECIPES / "criteria.yaml")
    entries = []
    for index in range(count):
        # Mostly wildcards, as real catalogs are: each field is set one time in three.
        fields = {
            f: rnd.choice(criteria.allowed(f)[1:]) if rnd.random() < 0.33 else "any"
            for f in CRITERIA_FIELDS
        }
        if fields["service"] != "any" or fields["platform"] != "any":
            fields["scheduler"] = "any"  # let the implication fill it
        spec = RecipeFile(name=f"r{index}", criteria=msgspec.convert(fields, Criteria))
        entries.append(RecipeEntry(spec, "overlay", f"<generated {index}>"))
    return Catalog.build(criteria, load_checks(RECIPES / "checks.yaml"), entries)


def run() -> dict[str, float]:
    """Time `match` on 10,000 recipes and constraint evaluation; return the figures."""
    rnd = random.Random(1337)
    started = time.perf_counter()
    catalog = _catalog(10_000, rnd)
    build_s = time.perf_counter() - started
    match(catalog, Criteria())  # builds the index once
    timings, sizes = [], []
    for _ in range(500):
        fields = {
            f: rnd.choice(catalog.criteria.allowed(f))
            for f in ("service", "accelerator", "os", "intent")
        }
        query = msgspec.convert(fields, Criteria)
        t0 = time.perf_counter()
        sizes.append(len(match(catalog, query)))
        timings.append(time.perf_counter() - t0)
    constraints = [
        Constraint(name="K8s.server.version", value=">= 1.32.4"),
        Constraint(name="OS.sysctl./proc/sys/kernel/osrelease", value=">=6.8,<7"),
        Constraint(name="OS.release.ID", value="in [ubuntu, rhel]"),
        Constraint(name="GPU.hardware.model", value="~ (?i)h100"),
        Constraint(name="Memory.info.total-bytes", value=">= 1GiB"),
        Constraint(name="GPU.smi.driver", value=">= 575.57.08"),
    ]
    readings: dict[str, Reading] = {
        "K8s.server.version": "v1.33.1-eks-abc",
        "OS.sysctl./proc/sys/kernel/osrelease": "6.8.0-1024-aws",
        "OS.release.ID": "ubuntu",
        "GPU.hardware.model": "NVIDIA H100 80GB HBM3",
        "Memory.info.total-bytes": 2**40,
    }
    rounds = 20_000
    t0 = time.perf_counter()
    for _ in range(rounds):
        evaluate_constraints(constraints, readings)
    eval_s = time.perf_counter() - t0
    return {
        "catalog_recipes": 10_000.0,
        "catalog_build_s": build_s,
        "match_median_ms": statistics.median(timings) * 1000,
        "match_p99_ms": sorted(timings)[int(len(timings) * 0.99)] * 1000,
        "match_mean_results": statistics.fmean(sizes),
        "constraint_evals_per_s": rounds * len(constraints) / eval_s,
    }


if __name__ == "__main__":
    figures = run()
    for key, value in figures.items():
        print(f"{key:24} {value:,.3f}")
    sys.exit(0 if figures["match_median_ms"] < 10 else 1)
