"""`cairn replay`: fold a study's stream (or one job's events) and print state and timeline."""

from __future__ import annotations

import click
import msgspec

from cairn.cli.jobview import print_job
from cairn.cli.output import emit, output_option
from cairn.cli.session import session_options, with_client
from cairn.client import Client
from cairn.client.prefix import resolve_job
from cairn.client.timeline import TimelineEntry, format_line
from cairn.state.view import StudyView


class ReplayOutput(msgspec.Struct, frozen=True, kw_only=True):
    """What `cairn replay -o json|yaml` prints: the folded state and the timeline."""

    state: StudyView
    timeline: list[TimelineEntry]


@click.command(
    help="Fold the study's stream with the same reducers the services use, and "
    "print the resulting state and the timeline of events."
)
@click.option(
    "--job", "job_id", default=None, metavar="JOB",
    help="Only this job's events and state (any unique prefix of its id)."
)
@session_options
@output_option(schema=ReplayOutput)
def replay(job_id: str | None, study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> tuple[StudyView, list[TimelineEntry]]:
        return await c.replay(await resolve_job(c, job_id) if job_id else None)

    view, timeline = with_client(study, actor, body)

    def table(_: object) -> None:
        if view.study is not None and job_id is None:
            s = view.study
            click.echo(
                f"study {s.name}: sites {', '.join(s.sites) or '(none)'}; admins "
                f"{', '.join(s.admins) or '(none)'}"
            )
        for job in view.jobs.values():
            click.echo("")
            print_job(job)
        click.echo("")
        click.echo("timeline:")
        for e in timeline:
            click.echo("  " + format_line(e))

    emit(ReplayOutput(state=view, timeline=timeline), output, table)
