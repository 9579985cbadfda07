"""`cairn validate --site S --recipe R`: ask the validator, follow the run, print the result."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import msgspec
import yaml

from cairn import subjects
from cairn.bus import Bus, objects, replay
from cairn.cli.output import emit, output_option
from cairn.cli.session import run, session_options
from cairn.client import Client
from cairn.errors import InvalidInput, NotFound, Timeout
from cairn.events import (
    FEDERATION_DECODER,
    ValidationCompleted,
    ValidationPhase,
    ValidationStarted,
)
from cairn.names import check_name

CLOCK_SKEW_S = 60.0
"""Events are read from this long before the request, so a validator whose clock is behind
ours is still followed (events are matched by run id, so older ones never mix in)."""
POLL_S = 0.25


class PhaseResult(msgspec.Struct, kw_only=True):
    status: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    reasons: list[str] = []
    ctrf: dict[str, Any] | None = None


class ValidationResult(msgspec.Struct, kw_only=True):
    """What `-o json|yaml` prints (stable fields)."""

    run: str
    site: str
    recipe: str
    status: str
    duration_s: float = 0.0
    message: str = ""
    snapshot_digest: str = ""
    phases: dict[str, PhaseResult] = {}


async def follow(bus: Bus, site: str, recipe: str, run_id: str, since: datetime,
                 timeout: float) -> list[Any]:
    """The run's events, in order, until `validation.completed`.

    Raises:
        Timeout: the run did not complete within `timeout` seconds.
    """
    stream = subjects.FEDERATION_STREAM.name
    filters = [subjects.validation_all(site, recipe)]
    found: list[Any] = []
    last = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        start: dict[str, Any] = {"start_seq": last + 1} if last else {"start_time": since}
        async for item in replay(bus, stream, FEDERATION_DECODER, filters=filters, **start):
            last = max(last, item.seq)
            event = item.event
            if getattr(event, "run", None) == run_id:
                found.append(event)
                if isinstance(event, ValidationCompleted):
                    return found
        await asyncio.sleep(POLL_S)
    raise Timeout(f"validation {run_id} did not complete within {timeout:g}s")


def result_of(events: list[Any]) -> ValidationResult:
    done = next(e for e in events if isinstance(e, ValidationCompleted))
    started = next((e for e in events if isinstance(e, ValidationStarted)), None)
    phases = {e.phase: PhaseResult(status=e.status, passed=e.passed, failed=e.failed,
                                   skipped=e.skipped, reasons=list(e.reasons), ctrf=e.ctrf)
              for e in events if isinstance(e, ValidationPhase)}
    return ValidationResult(run=done.run, site=done.site, recipe=done.recipe, status=done.status,
                            duration_s=done.duration_s, message=done.message,
                            snapshot_digest=started.snapshot_digest if started else "",
                            phases=phases)


async def write_out(bus: Bus, out: Path, result: ValidationResult, events: list[Any]) -> None:
    """DIR/result.json, DIR/ctrf/<phase>.json, DIR/snapshot.json, DIR/recipe.resolved.yaml:
    the files an evidence bundle holds."""
    try:
        (out / "ctrf").mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_bytes(msgspec.json.format(msgspec.json.encode(result)))
        for phase, item in result.phases.items():
            (out / "ctrf" / f"{phase}.json").write_text(json.dumps(item.ctrf, indent=2) + "\n")
        started = next((e for e in events if isinstance(e, ValidationStarted)), None)
        if started is not None and started.resolved is not None:
            (out / "recipe.resolved.yaml").write_text(
                yaml.safe_dump(started.resolved, sort_keys=False))
        if started is not None and started.snapshot_object:
            store = await objects(bus, subjects.OBJ_SNAPSHOTS)
            (out / "snapshot.json").write_bytes(await store.get(started.snapshot_object))
    except OSError as exc:
        raise InvalidInput(f"cannot write: {exc.strerror or exc}", file=str(out)) from None


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
@click.option("--site", required=True, help="The site to validate.")
@click.option("--recipe", required=True, help="The recipe (see `cairn recipe list`).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the results (CTRF per phase, snapshot, resolved recipe) to DIR.")
@click.option("--timeout", type=float, default=3600.0, show_default=True,
              help="Seconds to wait for the run to complete.")
@click.option("--no-fresh", is_flag=True, default=False,
              help="Judge the site's latest recorded snapshot instead of asking for a new one.")
@session_options
@output_option()
def validate(site: str, recipe: str, out: Path | None, timeout: float, no_fresh: bool,
             study: str | None, actor: str | None, output: str) -> None:
    check_name(site, "site")
    check_name(recipe, "recipe")

    async def body() -> ValidationResult:
        async with await Client.connect(study=study, actor=actor) as client:
            since = datetime.now(UTC) - timedelta(seconds=CLOCK_SKEW_S)
            answer = await client.call(subjects.api_validation("run"),
                                       {"site": site, "recipe": recipe, "fresh": not no_fresh})
            if not isinstance(answer, dict) or "run" not in answer:
                raise NotFound(f"unexpected answer from the validator: {answer!r}")
            events = await follow(client.bus, site, recipe, str(answer["run"]), since, timeout)
            result = result_of(events)
            if out is not None:
                await write_out(client.bus, out, result, events)
            return result

    result = run(body())
    emit(result, output, table=print_result)
    if result.status != "passed":
        raise SystemExit(1)
