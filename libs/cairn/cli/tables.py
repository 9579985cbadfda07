"""Tables for people that never cut what one must type.

A column is one of three kinds. `keep`: an id or a name (job id, recipe, site): never cut,
never left out. Plain: a short value (a time, a state, a count): never cut, but left out when
the table does not fit. `wrap`: free text (a message, a detail): folded onto more lines to fit,
and left out only when even folded it does not. Columns marked `wide` appear only with
`--wide`, which also shows every column at full width whatever the terminal's.

Off a terminal (a pipe, a file) the width is `$COLUMNS`, else 80, as rich decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

MIN_WRAP = 12
"""The narrowest a `wrap` column is folded to."""
WIDE_META = "cairn.wide"


@dataclass(frozen=True)
class Column:
    """One column of a table; see the module's docstring for the kinds."""

    name: str
    keep: bool = False
    wrap: bool = False
    wide: bool = False


def wide_requested() -> bool:
    """Whether the running command was given `--wide`."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().meta.get(WIDE_META))


def _remember_wide(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_root().meta[WIDE_META] = True


def wide_option() -> Any:
    """`--wide`: every column, at full width (read back with `wide_requested`)."""
    return click.option("--wide", is_flag=True, expose_value=False, is_eager=True,
                        callback=_remember_wide,
                        help="Tables: show every column at full width, wider than the "
                             "terminal if need be.")


def _text(cell: Any) -> Any:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell
    return Text("" if cell is None else str(cell))


def _width(cell: Any) -> int:
    return max((len(line) for line in cell.plain.split("\n")), default=0)


def _overhead(count: int) -> int:
    # Each column has a space either side and a rule after it, plus the rule at the left edge.
    return 3 * count + 1


@dataclass(frozen=True)
class Fit:
    shown: list[int]
    """Indexes of the columns shown, in order."""
    left_out: list[str]
    """Names of the columns left out to fit (not those that only --wide shows)."""
    width: int
    """The width the table needs at least (may exceed the terminal's: nothing kept is cut)."""


def fit(columns: Sequence[Column], widths: Sequence[int], room: int, *, wide: bool) -> Fit:
    """Which columns fit in `room` characters, given each column's full width."""
    shown = [i for i, c in enumerate(columns) if wide or not c.wide]
    if wide:
        return Fit(shown, [], sum(widths[i] for i in shown) + _overhead(len(shown)))

    def need(i: int) -> int:
        column = columns[i]
        least = max(len(column.name), MIN_WRAP) if column.wrap else widths[i]
        return min(widths[i], least)

    left_out: list[str] = []
    while sum(need(i) for i in shown) + _overhead(len(shown)) > room:
        droppable = [i for i in shown if not columns[i].keep]
        if not droppable:
            break
        # Plain columns go first (they cannot shrink), the right-most of them first.
        plain = [i for i in droppable if not columns[i].wrap]
        victim = (plain or droppable)[-1]
        shown.remove(victim)
        left_out.insert(0, columns[victim].name)
    return Fit(shown, left_out, sum(need(i) for i in shown) + _overhead(len(shown)))


def build(title: Any, columns: Sequence[Column | str], rows: Sequence[Sequence[Any]],
          room: int, *, wide: bool | None = None, caption: str | None = None) -> tuple[Any, int]:
    """A rich table of `rows` fitted to `room` columns, and the console width it needs."""
    from rich.table import Table

    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    wide = wide_requested() if wide is None else wide
    cells = [[_text(cell) for cell in row] for row in rows]
    widths = [max([len(c.name), *(_width(row[i]) for row in cells)]) for i, c in enumerate(cols)]
    chosen = fit(cols, widths, room, wide=wide)
    notes = [caption] if caption else []
    if chosen.left_out:
        notes.append(f"left out to fit {room} columns: {', '.join(chosen.left_out)} "
                     "(--wide, or -o json, shows them)")
    table = Table(title=title, title_justify="left", header_style="bold",
                  caption="\n".join(notes) or None, caption_justify="left")
    for i in chosen.shown:
        column = cols[i]
        if column.wrap and not wide:
            table.add_column(column.name, overflow="fold")
        else:
            table.add_column(column.name, no_wrap=True, overflow="ignore", min_width=widths[i])
    for row in cells:
        table.add_row(*(row[i] for i in chosen.shown))
    return table, max(room, chosen.width)


def print_table(title: Any, columns: Sequence[Column | str],
                rows: Sequence[Sequence[Any]], *, caption: str | None = None) -> None:
    """Print a table on stdout, fitted to the terminal (or `$COLUMNS`, else 80)."""
    from rich.console import Console

    console = Console()
    table, needs = build(title, columns, rows, console.width, caption=caption)
    if needs > console.width:
        console = Console(width=needs)
    console.print(table)
