"""`cairn snapshot` (what a site really is) and `cairn diff A B` (what changed)."""

from __future__ import annotations

from pathlib import Path

import click

from cairn.cli.output import emit, output_option
from cairn.errors import InvalidInput, Unverified
from cairn.names import check_name
from cairn.snapshot import model
from cairn.snapshot.model import Change, CollectorError, Reading, Snapshot


def ask_site(site: str, timeout: float = 30.0) -> Snapshot:
    """Ask `site`'s snapshotter for a fresh snapshot over the bus (it records it too).

    Raises:
        Unavailable: no context/bus, or no snapshotter answers for `site` (exit 7).
        Timeout: it did not answer within `timeout` seconds (exit 8).
    """
    from cairn.cli.session import run
    from cairn.client import Client

    async def body() -> Snapshot:
        async with await Client.connect(request_timeout=timeout) as client:
            return await client.snapshot(site, timeout=timeout)

    return run(body())


def _value(value: Reading | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return ", ".join(value) if value else "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _print_errors(console: object, errors: list[CollectorError]) -> None:
    from rich.console import Console

    assert isinstance(console, Console)
    for error in errors:
        # Absent tools are facts about the site, not failures: dim, not red.
        style = "yellow" if error.absent else "bold red"
        label = "absent" if error.absent else "error"
        console.print(
            f"  [{style}]{label}[/] {error.collector}: {error.message}",
            markup=True,
            highlight=False,
        )


def _print_readings(console: object, title: str, flat: dict[str, Reading]) -> None:
    from rich.console import Console
    from rich.table import Table

    assert isinstance(console, Console)
    by_type: dict[str, list[tuple[str, Reading]]] = {}
    for path, value in flat.items():
        by_type.setdefault(path.split(".", 1)[0], []).append((path, value))
    for type_, rows in by_type.items():
        table = Table(
            title=f"{title} — {type_}", title_justify="left", show_header=True, header_style="bold"
        )
        table.add_column("path", overflow="fold")
        table.add_column("value", overflow="fold")
        for path, value in rows:
            table.add_row(path, _value(value))
        console.print(table)


def print_snapshot(snap: Snapshot) -> None:
    """A rich table per measurement type, under a heading per node; errors in red."""
    from rich.console import Console

    console = Console()
    console.print(
        f"[bold]snapshot[/] site={snap.site or '(local)'} taken_at="
        f"{snap.taken_at.isoformat()} digest={snap.digest[:12]}",
        highlight=False,
    )
    if snap.cluster or snap.errors:
        console.rule("[bold]cluster")
        _print_readings(console, "cluster", model.flatten(snap.cluster))
        _print_errors(console, snap.errors)
    for node in snap.nodes:
        console.rule(f"[bold]node {node.node}")
        _print_readings(console, node.node, model.flatten(node))
        _print_errors(console, node.errors)


def print_changes(changes: list[Change]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not changes:
        console.print("snapshots are equal")
        return
    table = Table(show_header=True, header_style="bold")
    for column in ("node", "path", "before", "after"):
        table.add_column(column, overflow="fold")
    for change in changes:
        table.add_row(
            change.node or "(cluster)",
            change.path,
            f"[red]{_value(change.before)}[/]",
            f"[green]{_value(change.after)}[/]",
        )
    console.print(table)


SNAPSHOT_HELP = """Record what a site really is: OS, kernel, CPUs, memory, NUMA, GPUs and
their topology, Docker, Slurm.

\b
Without --site, collects on this machine (no bus needed). With --site S, asks
site S's snapshotter over the bus. A collector that fails or whose tool is absent
is recorded in the snapshot, never fatal. --format aicr writes AICR's
document (kind: Snapshot, measurements by type and subtype) of the cluster and
one node (--node, default the first), for `aicr` and for `cairn validate
--snapshot`. Exit codes: 0 ok; 3 bad --site or --out; 4 no such --node; 7 the
bus or the site's snapshotter cannot be reached.
"""


@click.command(help=SNAPSHOT_HELP)
@output_option(schema=Snapshot)
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the snapshot as JSON to FILE (input for `cairn diff`).",
)
@click.option("--site", default=None, help="Ask this site's snapshotter (over the bus).")
@click.option("--format", "shape", type=click.Choice(("cairn", "aicr")), default="cairn",
              show_default=True, help="Snapshot shape: Cairn's, or AICR's kind: Snapshot.")
@click.option("--node", default=None, help="With --format aicr: the node written (default: "
                                           "the first).")
def snapshot(output: str, out: Path | None, site: str | None, shape: str,
             node: str | None) -> None:
    if site is not None:
        snap = ask_site(check_name(site, "site"))
    else:
        from cairn.snapshot.collect import collect_local

        snap = collect_local()
    if shape == "aicr":
        _emit_aicr(snap, node, out, output)
        return
    if out is not None:
        try:
            out.write_bytes(model.encode(snap) + b"\n")
        except OSError as exc:
            raise InvalidInput(f"cannot write: {exc.strerror or exc}", file=str(out)) from None
    emit(snap, output, table=print_snapshot)


def _emit_aicr(snap: Snapshot, node: str | None, out: Path | None, output: str) -> None:
    import json

    from cairn.cli.output import yaml_text
    from cairn.recipes.aicr.snapshots import to_aicr

    doc = to_aicr(snap, node)
    if out is not None:
        text = yaml_text(doc) if out.suffix in (".yaml", ".yml") else json.dumps(doc, indent=2)
        try:
            out.write_text(text + ("" if text.endswith("\n") else "\n"))
        except OSError as exc:
            raise InvalidInput(f"cannot write: {exc.strerror or exc}", file=str(out)) from None
    emit(doc, output, table=lambda d: click.echo(yaml_text(d), nl=False))


def _load_checked(path: Path, no_verify: bool) -> Snapshot:
    """A snapshot file; one whose digest is not its content's does not verify (exit 9).
    AICR's snapshot documents carry no digest and are read as they are."""
    from cairn.recipes.aicr.snapshots import is_aicr_file, read_snapshot

    if is_aicr_file(path):
        return read_snapshot(path)
    snap = model.load(path, verify=False)
    if not no_verify and snap.digest != model.compute_digest(snap):
        raise Unverified("digest does not match content (file altered? --no-verify compares "
                         "it anyway)", file=str(path))
    return snap


DIFF_HELP = """Compare two snapshot files (from `cairn snapshot --out`, or AICR's kind:
Snapshot documents) and print every reading added, removed or changed from A to B.

\b
Exit codes: 0 the snapshots are equal; 1 they differ; 3 a file cannot be read
or is not a snapshot; 9 a file's digest does not match its content (altered;
see --no-verify).
"""


@click.command(help=DIFF_HELP)
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option(
    "--no-verify",
    is_flag=True,
    default=False,
    help="Compare even when a file's digest does not match (hand-edited files).",
)
@click.option(
    "--ignore",
    "ignore",
    multiple=True,
    metavar="GLOB",
    help="Leave out paths matching GLOB (repeatable), e.g. 'Memory.info.available-*'.",
)
@output_option(schema=list[Change])
def diff(a: Path, b: Path, no_verify: bool, ignore: tuple[str, ...], output: str) -> None:
    before, after = _load_checked(a, no_verify), _load_checked(b, no_verify)
    changes = model.diff(before, after, ignore=ignore)
    emit(changes, output, table=print_changes)
    if changes:
        raise SystemExit(1)
