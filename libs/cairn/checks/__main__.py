"""`python -m cairn.checks NAME [--params JSON]`: run one check, print its result line."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

# Taken first thing: gang-start compares when each rank's process began.
_STARTED = time.time()

from cairn.checks import MODULES, run_check  # noqa: E402
from cairn.checks.report import format_line  # noqa: E402

EXIT = {"passed": 0, "skipped": 0, "failed": 1, "error": 2}


def _rank() -> int:
    # Ranks of one check on the process backend are roles `rank-<n>` of one job.
    match = re.fullmatch(r"rank-(\d+)", os.environ.get("CAIRN_ROLE", ""))
    return int(match.group(1)) if match else int(os.environ.get("CAIRN_RANK", "0") or 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cairn.checks",
                                     description="Run one Cairn recipe check.")
    parser.add_argument("check", choices=sorted(MODULES))
    parser.add_argument("--params", default=None,
                        help="JSON parameters (default: $CAIRN_PARAMS, set by the launcher)")
    args = parser.parse_args(argv)
    raw = args.params if args.params is not None else os.environ.get("CAIRN_PARAMS", "{}")
    try:
        params = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        print(f"error: --params is not JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(params, dict):
        print("error: --params must be a JSON object", file=sys.stderr)
        return 2
    report = run_check(args.check, params, rank=_rank(), started_at=_STARTED)
    print(format_line(report), flush=True)
    return EXIT[report.status]


if __name__ == "__main__":
    sys.exit(main())
