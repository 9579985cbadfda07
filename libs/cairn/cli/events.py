"""`cairn events tail`: the study's stream, one line per event (or JSON lines)."""

from __future__ import annotations

import click
import msgspec

from cairn.cli.session import session_options, with_client
from cairn.client import Client
from cairn.client.timeline import format_line


@click.group(help="Read the study's event stream.")
def events() -> None:
    pass


@events.command(
    help="Print the study's last N events; with --follow, keep printing new ones (Ctrl-C stops)."
)
@click.option(
    "-n",
    "--lines",
    "count",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="How many past events to print (0: none).",
)
@click.option("--all", "everything", is_flag=True, help="Print every past event.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing events as they are stored.")
@click.option("--job", "job_id", default=None, metavar="JOB", help="Only this job's events.")
@click.option(
    "-o",
    "--output",
    type=click.Choice(("table", "json")),
    default="table",
    show_default=True,
    help="`json`: one timeline entry per line.",
)
@session_options
def tail(
    count: int,
    everything: bool,
    follow: bool,
    job_id: str | None,
    output: str,
    study: str | None,
    actor: str | None,
) -> None:
    async def body(c: Client) -> None:
        async for e in c.events(tail=None if everything else count, follow=follow, job=job_id):
            if output == "json":
                click.echo(msgspec.json.encode(e).decode())
            else:
                click.echo(format_line(e))

    with_client(study, actor, body)
