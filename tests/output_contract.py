"""Every `cairn ... -o json` a test runs is held to the type its command declares.

A command's `output_option(schema=T)` is its `-o json` contract, and that type's JSON Schema
is in the CLI's compatibility baseline (compat/cli.json). The CLI runners of the tests pass
each successful `-o json` run through `check_json_output`, which decodes what was printed as
`T`: a command that prints something else than it declares fails the test that ran it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click
import msgspec

from cairn.cli.main import cli
from cairn.cli.output import OutputOption


def _json_requested(args: Sequence[str]) -> bool:
    for i, arg in enumerate(args):
        if arg in ("-o", "--output") and i + 1 < len(args) and args[i + 1] == "json":
            return True
        if arg in ("-ojson", "--output=json"):
            return True
    return False


def _aicr_format(args: Sequence[str]) -> bool:
    return any((arg == "--format" and i + 1 < len(args) and args[i + 1] == "aicr")
               or arg == "--format=aicr" for i, arg in enumerate(args))


def declared_output(args: Sequence[str]) -> Any:
    """The type the command that `args` runs declares for `-o json`, or None."""
    cmd: click.Command = cli
    ctx = click.Context(cli, info_name="cairn")
    for arg in args:
        if not isinstance(cmd, click.Group):
            break
        if arg.startswith("-"):
            continue
        sub = cmd.get_command(ctx, arg)
        if sub is None:
            return None
        cmd, ctx = sub, click.Context(sub, info_name=arg, parent=ctx)
    for param in cmd.get_params(ctx):
        if isinstance(param, OutputOption):
            return param.schema
    return None


def check_json_output(args: Sequence[str], code: int, stdout: str) -> None:
    """Fail when an `-o json` run that printed its result (exit 0, or 1: a job that failed, a
    validation that did not pass) printed what its command does not declare."""
    if code not in (0, 1) or not stdout.strip() or not _json_requested(args):
        return
    if _aicr_format(args):
        return  # AICR's documents (`--format aicr`): their shape is AICR's, not Cairn's type

    schema = declared_output(args)
    if schema is None:
        return
    try:
        msgspec.json.decode(stdout.strip().encode(), type=schema)
    except msgspec.ValidationError as exc:
        raise AssertionError(f"`cairn {' '.join(args)}` printed JSON that is not its declared "
                             f"output type {schema!r}: {exc}") from None
