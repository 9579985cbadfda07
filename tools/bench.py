"""`make bench`: every benchmark section, as ONE JSON document on stdout (progress on stderr).

    .venv/bin/python tools/bench.py [--only bus[,snapshot,...]]

Each section is a module `tools/bench_<name>.py` with `run() -> dict` (a coroutine is awaited).
A module that does not exist yet is recorded as `{"skipped": why}`; one that fails is recorded
as `{"error": why}` and the exit code is 1, after the other sections have run. Last comes
`targets` (tools/bench_targets.py): every figure with a target, met or not, beside NVIDIA
FLARE's where there is one.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
for path in (TOOLS, TOOLS.parent):  # `bench_x` and `tools.bench_x` both import when run as a script
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# Section name -> module; sections other engineers add appear here as their modules land.
SECTIONS = {
    "bus": "bench_bus",
    "snapshot": "bench_snapshot",
    "recipes": "bench_recipes",
    "recipes_aicr": "bench_recipes_aicr",
    "control": "bench_control",
    "fedavg": "bench_fedavg",
    "sim": "bench_sim",
    "stop": "bench_stop",
    "slurm": "bench_slurm",
    "evidence": "bench_evidence",
    "launchers": "bench_launchers",
    "sandbox": "bench_sandbox",
    "hostile": "bench_hostile",
    "deploy": "bench_deploy",
    "security": "bench_security",
    "nonces": "bench_nonces",
    "guard": "bench_guard",
    "bundles": "bench_bundles",
    "workflows": "bench_workflows",
    "perf": "bench_perf",
    "scale_payloads": "bench_scale_payloads",
    "api": "bench_api",
    "scale_cluster": "bench_scale_cluster",
    "scale-sites": "bench_scale_sites",
    "scale_standby": "bench_scale_standby",
}


def run_section(module_name: str) -> tuple[dict[str, Any], bool]:
    """(result, ok) of one section."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return {"skipped": f"tools/{module_name}.py is not there yet"}, True
        return {"error": f"import failed: {exc}"}, False
    run = getattr(module, "run", None)
    if not callable(run):
        return {"error": f"tools/{module_name}.py has no run()"}, False
    started = time.perf_counter()
    try:
        result = run()
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
    except Exception as exc:  # noqa: BLE001 - one broken section must not hide the others
        traceback.print_exc(file=sys.stderr)
        return {"error": f"{type(exc).__name__}: {exc}"}, False
    if not isinstance(result, dict):
        return {"error": f"run() returned {type(result).__name__}, not a dict"}, False
    return {**result, "elapsed_s": round(time.perf_counter() - started, 2)}, True


async def _awaited(result: Any) -> Any:
    return await result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--only", default="", help=f"comma-separated sections to run, of: {', '.join(SECTIONS)}"
    )
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or list(SECTIONS)
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    doc: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    ok = True
    for name in chosen:
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        doc[name], section_ok = run_section(SECTIONS[name])
        ok = ok and section_ok
    from bench_targets import targets

    doc["targets"] = targets(doc)
    print(json.dumps(doc, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
