"""`cairn validate --site S --recipe R`: ask the validator, follow the run, print the result."""

from __future__ import annotations

from pathlib import Path

import click

from cairn.cli.output import emit, output_option
from cairn.cli.session import run, session_options
from cairn.client import Client
from cairn.client.validation import ValidationResult, run_validation
from cairn.names import check_name


def print_result(result: ValidationResult) -> None:
    """Per phase a table of its checks and constraints; failing rows say how to fix them."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    colour = {"passed": "green", "failed": "red", "skipped": "yellow", "other": "yellow"}
    for phase, item in result.phases.items():
        table = Table(title=f"{phase}: {item.status}", title_justify="left", header_style="bold")
        for column in ("kind", "name", "status", "detail", "remediation"):
            table.add_column(column, overflow="fold")
        for test in (item.ctrf or {}).get("results", {}).get("tests", []):
            extra = test.get("extra", {})
            shown = test["status"] if test["status"] == test.get("rawStatus") else \
                f"{test['status']} ({test.get('rawStatus')})"
            # Messages hold expressions like `in [a, b]`: escaped, or rich reads them as markup.
            table.add_row(test.get("type", ""), escape(test["name"]),
                          f"[{colour.get(test['status'], 'white')}]{escape(shown)}[/]",
                          escape(test.get("message", "")),
                          escape(extra.get("remediation", "")) if test["status"] != "passed"
                          else "")
        console.print(table)
    line = (f"[bold]{result.site}[/] against [bold]{escape(result.recipe)}[/]: "
            f"[{colour.get(result.status, 'red')}]{result.status}[/] in {result.duration_s:.1f}s"
            f" (run {result.run})")
    console.print(line + (f": {escape(result.message)}" if result.message else ""),
                  highlight=False)


HELP = """Validate SITE against RECIPE: the recipe's constraints against the site's
snapshot, and its checks run as jobs on the site (reserved study `validation`).

\b
Offline, with no federation: --snapshot FILE --recipe FILE judges the recipe's
constraints against a snapshot file (Cairn's `cairn snapshot --out`, or AICR's
kind: Snapshot); the recipe is a RecipeResult file, Cairn's resolved recipe, or
a catalog recipe NAME. Only the readiness phase is judged; the others need
checks run on the cluster and are listed as not run.

\b
Needs a running validator (`cairn run validator`, part of `cairn up`). Missing
data fails a constraint unless it is optional; a skipped check fails its phase.
--out DIR writes result.json, ctrf/<phase>.json (CTRF), snapshot.json and
recipe.resolved.yaml.

\b
Exit codes: 0 every phase passed; 1 a phase failed (or the run could not be
carried out); 3 bad name or --out; 4 unknown site or recipe; 7 the validator or
bus cannot be reached; 8 the run did not complete within --timeout.
"""


@click.command(help=HELP)
@click.option("--site", default=None, help="The site to validate.")
@click.option("--recipe", required=True,
              help="The recipe (see `cairn recipe list`); with --snapshot, also a recipe FILE.")
@click.option("--snapshot", "snapshot_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, metavar="FILE",
              help="Judge this snapshot file offline instead of a site (no federation).")
@click.option("--catalog", "catalog_dir", type=click.Path(file_okay=False), default=None,
              envvar="CAIRN_RECIPES", help="With --snapshot: catalog a recipe NAME is in.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the results (CTRF per phase, snapshot, resolved recipe) to DIR.")
@click.option("--timeout", type=float, default=3600.0, show_default=True,
              help="Seconds to wait for the run to complete.")
@click.option("--no-fresh", is_flag=True, default=False,
              help="Judge the site's latest recorded snapshot instead of asking for a new one.")
@session_options
@output_option(schema=ValidationResult)
def validate(site: str | None, recipe: str, snapshot_file: Path | None,
             catalog_dir: str | None, out: Path | None, timeout: float, no_fresh: bool,
             study: str | None, actor: str | None, output: str) -> None:
    if snapshot_file is not None:
        if site is not None or out is not None:
            raise click.UsageError("--snapshot validates offline: give it without --site/--out")
        from cairn.cli.validateoffline import validate_offline

        validate_offline(snapshot_file, recipe, catalog_dir, output)
        return
    if site is None:
        raise click.UsageError("give --site SITE (or --snapshot FILE to validate offline)")
    check_name(site, "site")
    check_name(recipe, "recipe")

    async def body() -> ValidationResult:
        async with await Client.connect(study=study, actor=actor) as client:
            return await run_validation(client, site, recipe, fresh=not no_fresh,
                                        timeout=timeout, out=out)

    result = run(body())
    emit(result, output, table=print_result)
    if result.status != "passed":
        raise SystemExit(1)
