"""`cairn events tail`: the study's stream, one line per event (or JSON lines)."""

from __future__ import annotations

import click
import msgspec

from cairn.cli.output import output_option, yaml_text
from cairn.cli.session import session_options, with_client
from cairn.client import Client
from cairn.client.prefix import resolve_job
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
@click.option("--job", "job_id", default=None, metavar="JOB",
              help="Only this job's events (any unique prefix of its id).")
@output_option(help="`table`: one line per event; `json`: one timeline entry per line; "
                    "`yaml`: one YAML document per entry.")
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
        job = await resolve_job(c, job_id) if job_id else None
        async for e in c.events(tail=None if everything else count, follow=follow, job=job):
            if output == "json":
                click.echo(msgspec.json.encode(e).decode())
            elif output == "yaml":
                # A document per event, so a follower can parse each as it comes.
                click.echo("---\n" + yaml_text(e).rstrip())
            else:
                click.echo(format_line(e))

    with_client(study, actor, body)
