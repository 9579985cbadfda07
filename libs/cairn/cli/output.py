"""Printing for people (tables, YAML) and for programs (`-o json|yaml`, stable fields).

`-o` is the output format on every command; a directory or a file to write is `--out`. A
value of `-o` that is not a format (`-o out/`, `-o bundle.tgz`) is a usage error that says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click
import msgspec
import yaml

from cairn.cli.tables import Column, print_table, wide_option

__all__ = ["OUTPUT_CHOICES", "Column", "OutputFormat", "OutputOption", "emit", "output_option",
           "print_table", "to_builtins", "yaml_text"]

OUTPUT_CHOICES = ("table", "json", "yaml")


class OutputFormat(click.Choice[str]):
    """`table`, `json` or `yaml`; anything else is refused with what `-o` means here."""

    name = "format"

    def __init__(self, choices: tuple[str, ...] = OUTPUT_CHOICES) -> None:
        super().__init__(choices)

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        if isinstance(value, str) and value in self.choices:
            return value
        formats = ", ".join(self.choices)
        self.fail(f"{value!r} is not an output format ({formats}): -o is the output format on "
                  "every command; a directory or file to write is --out", param, ctx)


class OutputOption(click.Option):
    """`-o/--output`, knowing the type of what its command prints with `-o json|yaml`.

    That type is the command's structured output contract: `tools/compat.py` writes its JSON
    Schema into the CLI's compatibility baseline (docs/compatibility.md). A command whose
    option names no type prints JSON that is experimental: not held to the baseline.
    """

    def __init__(self, *args: Any, schema: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schema = schema


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def output_option(default: str = "table", choices: tuple[str, ...] = OUTPUT_CHOICES,
                  help: str = "Output format.", schema: Any = None) -> Decorator:
    """`-o/--output FORMAT`, and `--wide` for the table view.

    Args:
        schema: The type of what `-o json` prints (a msgspec Struct, a list of them, ...),
            the command's stable output; None where that output is not (yet) a contract.
    """

    def add(func: Callable[..., Any]) -> Callable[..., Any]:
        func = wide_option()(func)
        return click.option("-o", "--output", "output", type=OutputFormat(choices),
                            default=default, show_default=True, help=help, cls=OutputOption,
                            schema=schema)(func)

    return add


def to_builtins(data: Any) -> Any:
    return msgspec.to_builtins(data)


def yaml_text(data: Any) -> str:
    """`data` as block YAML, in the order it was built (what the table view shows of values)."""
    return yaml.safe_dump(to_builtins(data), sort_keys=False, allow_unicode=True,
                          default_flow_style=False)


def emit(data: Any, output: str, table: Callable[[Any], None] | None = None) -> None:
    """Print `data` as JSON, YAML or (via `table`) for people."""
    if output == "json":
        sys.stdout.write(msgspec.json.encode(to_builtins(data)).decode() + "\n")
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(to_builtins(data), sort_keys=False))
    elif table is not None:
        table(data)
    else:
        sys.stdout.write(yaml.safe_dump(to_builtins(data), sort_keys=False))
