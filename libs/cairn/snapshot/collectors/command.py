"""Running a tool with a timeout; a tool that is not installed raises `ToolAbsent`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence

from cairn.snapshot.collectors.collected import ToolAbsent

DEFAULT_TIMEOUT = 5.0
"""Seconds any one tool may run; a hung driver or daemon must not hang a snapshot."""


class CommandFailed(Exception):
    """The tool ran and exited non-zero."""

    def __init__(self, argv: Sequence[str], returncode: int, output: str) -> None:
        first = output.strip().splitlines()[0] if output.strip() else "no output"
        super().__init__(f"{' '.join(argv)} exited {returncode}: {first}")
        self.returncode = returncode
        self.output = output


def run_command(
    argv: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> str:
    """Run `argv` and return its stdout.

    Raises:
        ToolAbsent: the program is not on PATH.
        CommandFailed: it exited non-zero (with `check`).
        subprocess.TimeoutExpired: it ran past `timeout` (the process is killed).
    """
    if shutil.which(argv[0], path=(env or {}).get("PATH")) is None:
        raise ToolAbsent(f"{argv[0]} not found")
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env) if env is not None else None,
        check=False,
    )
    if check and proc.returncode != 0:
        raise CommandFailed(argv, proc.returncode, proc.stderr or proc.stdout)
    return proc.stdout
