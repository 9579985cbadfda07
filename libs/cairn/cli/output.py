"""Printing for people (rich tables) and for programs (`-o json|yaml`, stable fields)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import click
import msgspec
import yaml

OUTPUT_CHOICES = ("table", "json", "yaml")


def output_option(default: str = "table") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("-o", "--output", "output", type=click.Choice(OUTPUT_CHOICES),
                        default=default, show_default=True, help="Output format.")


def to_builtins(data: Any) -> Any:
    return msgspec.to_builtins(data)


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


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_header=True, header_style="bold")
    for column in columns:
        t.add_column(column)
    for row in rows:
        t.add_row(*("" if cell is None else str(cell) for cell in row))
    Console().print(t)
