"""`cairn ARGS` run in this process through `main`, as the console script runs it: for tests
that need no federation (the in-process twin of tests/integration/cli_run.py)."""

from __future__ import annotations

import sys

from click.testing import CliRunner

from cairn.cli.main import main
from tests.output_contract import check_json_output


def cairn(*args: str, env: dict[str, str | None] | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `cairn ARGS`, with `env` over this process's (None
    unsets a variable)."""
    runner = CliRunner()
    with runner.isolation(env=env) as streams:
        try:
            code = main(list(args)) or 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        # `emit` writes to sys.stdout, a buffered wrapper here: flush before reading it.
        sys.stdout.flush()
        sys.stderr.flush()
        out, err = streams[0].getvalue().decode(), streams[1].getvalue().decode()
    check_json_output(args, int(code), out)
    return int(code), out, err
