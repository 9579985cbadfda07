"""Benchmark rendering one recipe's bundle for every deployer (16 components).

Run: `.venv/bin/python tools/bench_bundles.py`. Target: the pulumi and k0rdent deployers
render within 2x the helm deployer's time (`<deployer>_vs_helm` at most 2.0). Rendering is
pure (plan in, file bytes out), so the figures are the median of repeated `render_files`
calls on one plan per deployer; planning (resolving the recipe, composing the values, the
same for every deployer) is timed once, cold, beside them.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import cast

from cairn.bundles import DEPLOYERS, Deployer, GitTarget, plan_bundle, render_files
from cairn.recipes import load_catalog

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
RECIPE = "h100-eks-ubuntu-inference-dynamo"
ROUNDS = 15
NEW = ("pulumi", "k0rdent")
TARGET_RATIO = 2.0


def _median_ms(call: object, rounds: int) -> float:
    assert callable(call)
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000


def run() -> dict[str, float]:
    catalog = load_catalog(RECIPES)
    git = GitTarget(repo_url="https://git.example.com/gpu.git", path="clusters/gpu")
    out: dict[str, float] = {}
    started = time.perf_counter()
    plan_bundle(catalog, RECIPE, "helm")
    out["plan_cold_ms"] = (time.perf_counter() - started) * 1000
    for deployer in DEPLOYERS:
        plan = plan_bundle(catalog, RECIPE, cast(Deployer, deployer))
        out["components"] = float(len(plan.manifest.components))
        files = render_files(plan, git)
        out[f"{deployer}_files"] = float(len(files))
        out[f"{deployer}_bytes"] = float(sum(map(len, files.values())))
        out[f"{deployer}_render_ms"] = _median_ms(lambda p=plan: render_files(p, git), ROUNDS)
    for deployer in NEW:
        out[f"{deployer}_vs_helm"] = out[f"{deployer}_render_ms"] / out["helm_render_ms"]
    return out


if __name__ == "__main__":
    figures = run()
    for key, value in figures.items():
        print(f"{key:24} {value:,.3f}")
    sys.exit(0 if all(figures[f"{d}_vs_helm"] <= TARGET_RATIO for d in NEW) else 1)
