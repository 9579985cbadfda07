"""`cairn job ...`: submit, watch, inspect, cancel and rerun jobs; read their logs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import click

from cairn.cli import jobnew
from cairn.cli.jobview import print_job, print_jobs, show_live, verdict
from cairn.cli.output import emit, output_option
from cairn.cli.session import session_options, with_client
from cairn.client import Client
from cairn.client.prefix import resolve_job
from cairn.spec.job import load_job_spec
from cairn.spec.params import apply_sets
from cairn.state.job import JOB_ORDER, JobState

SUBMIT_HELP = """Submit the job described by FILE (a job.yaml) and print its id.

\b
The job's code folder is packed and stored in the study's artifacts under its
sha256; the spec's `study:` wins over the session's study. With --watch, show
live progress per site and role until the job ends, then exit 0 if it
completed and 1 if it failed, was aborted or was unschedulable.

--set params.KEY=VALUE changes one of the spec's params for this run (repeatable):
only a param the spec declares, with a value of its type (`5`, `0.1`, `true`,
`[1, 2]`); the job's `job.submitted` event records the params it ran with.

In a secure federation the request is signed with the session's credential and
the coordinator records the signer as the job's actor.
"""

JOB_ARG_HELP = "JOB may be any unique prefix of the job id (with or without its `j-`)."


@click.group(help="Submit, watch and manage jobs.")
def job() -> None:
    pass


@job.command(help=SUBMIT_HELP)
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="params.KEY=VALUE",
              help="Set one of the spec's params for this run, typed as the spec declares it "
                   "(repeatable).")
@click.option(
    "--watch", is_flag=True, help="Follow the job until it ends; exit 1 unless it completed."
)
@click.option(
    "--timeout",
    type=float,
    default=None,
    metavar="SECONDS",
    help="With --watch: give up (exit 8) after this long.",
)
@session_options
@output_option()
def submit(
    file: Path,
    sets: tuple[str, ...],
    watch: bool,
    timeout: float | None,
    study: str | None,
    actor: str | None,
    output: str,
) -> None:
    # Check the spec and the sets before connecting: a typo is exit 3 even with no
    # federation running.
    apply_sets(load_job_spec(file), sets, file=str(file))

    _start(lambda c: c.submit(file, sets), watch, timeout, study, actor, output)


async def _wait(c: Client, job_id: str, limit_s: float | None, output: str) -> JobState:
    if output == "table":
        return await show_live(c.watch(job_id, timeout=limit_s))
    return await c.wait(job_id, timeout=limit_s)


def _finish(final: JobState, output: str) -> None:
    if output != "table":
        emit(final, output)
    verdict(final)


@job.command(name="list", help="List the study's jobs, newest last.")
@click.option(
    "--state", type=click.Choice(sorted(JOB_ORDER)), default=None, help="Only jobs in this state."
)
@session_options
@output_option(schema=list[JobState])
def list_(state: str | None, study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> list[JobState]:
        return await c.jobs(state)

    emit(with_client(study, actor, body), output, print_jobs)


@job.command(help="Show a job: its state, each worker's state and outcome, and its results "
                  f"(as YAML). {JOB_ARG_HELP}")
@click.argument("job_id", metavar="JOB")
@session_options
@output_option(schema=JobState)
def show(job_id: str, study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> JobState:
        return await c.job(await resolve_job(c, job_id))

    emit(with_client(study, actor, body), output, print_job)


@job.command(help="Download a job's result files and values (digest-checked) into a folder: "
                  "<DIR>/<role>@<site>/<file>, and result.json for each result value. "
                  + JOB_ARG_HELP)
@click.argument("job_id", metavar="JOB")
@click.option("--out", "--dest", "dest", type=click.Path(path_type=Path), default=None,
              metavar="DIR", help="Folder to write into (default: ./<JOB>).")
@session_options
@output_option(schema=list[str])
def fetch(job_id: str, dest: Path | None, study: str | None, actor: str | None,
          output: str) -> None:
    async def body(c: Client) -> list[str]:
        whole = await resolve_job(c, job_id)
        return [str(p) for p in await c.fetch(whole, dest or Path(whole))]

    def table(paths: list[str]) -> None:
        for path in paths:
            click.echo(path)
        if not paths:
            click.echo("the job returned no results")

    emit(with_client(study, actor, body), output, table)


@job.command(help="Ask the coordinator to cancel a job (its workers are stopped). "
                  + JOB_ARG_HELP)
@click.argument("job_id", metavar="JOB")
@click.option("--reason", default="cancelled", show_default=True, help="Why, for the record.")
@session_options
@output_option(schema=JobState)
def cancel(job_id: str, reason: str, study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> JobState:
        return await c.cancel(await resolve_job(c, job_id), reason)

    emit(with_client(study, actor, body), output, print_job)


@job.command(help="Wait until a job ends; exit 0 if it completed, 1 otherwise, 8 on timeout. "
                  + JOB_ARG_HELP)
@click.argument("job_id", metavar="JOB")
@click.option(
    "--timeout",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Give up (exit 8) after this long.",
)
@session_options
@output_option(schema=JobState)
def wait(
    job_id: str, timeout: float | None, study: str | None, actor: str | None, output: str
) -> None:
    async def body(c: Client) -> JobState:
        return await c.wait(await resolve_job(c, job_id), timeout=timeout)

    final = with_client(study, actor, body)
    emit(final, output, print_job)
    verdict(final)


@job.command(help="Submit a recorded job again with the same code bundle; prints the new id. "
                  + JOB_ARG_HELP)
@click.argument("job_id", metavar="JOB")
@click.option("--watch", is_flag=True, help="Follow the new job until it ends.")
@click.option(
    "--timeout",
    type=float,
    default=None,
    metavar="SECONDS",
    help="With --watch: give up (exit 8) after this long.",
)
@session_options
@output_option()
def rerun(
    job_id: str,
    watch: bool,
    timeout: float | None,
    study: str | None,
    actor: str | None,
    output: str,
) -> None:
    async def start(c: Client) -> str:
        return await c.rerun(await resolve_job(c, job_id))

    _start(start, watch, timeout, study, actor, output)


@job.command(help="Print the logs the launchers captured for a job's workers (stdout and "
                  "stderr of each). A worker that wrote nothing is named on stderr, with why. "
                  + JOB_ARG_HELP)
@click.argument("job_id", metavar="JOB")
@click.option("--site", default=None, help="Only workers at this site.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until every worker exited.")
@click.option(
    "--prefix/--no-prefix",
    default=True,
    show_default=True,
    help="Start each line with `site role/rank |`.",
)
@session_options
def logs(
    job_id: str, site: str | None, follow: bool, prefix: bool, study: str | None, actor: str | None
) -> None:
    async def body(c: Client) -> None:
        whole = await resolve_job(c, job_id)
        partial: dict[tuple[str, str, int], bytes] = {}
        wrote: set[tuple[str, str, int]] = set()
        async for chunk in c.logs(whole, site, follow=follow):
            who = (chunk.site, chunk.role, chunk.rank)
            tag = f"{chunk.site} {chunk.role}/{chunk.rank} | " if prefix else ""
            if chunk.error:
                wrote.add(who)
                click.echo(f"warning: {tag}{chunk.error}", err=True)
                continue
            if chunk.data:
                wrote.add(who)
            # Only whole lines are printed with their prefix; the rest waits for its end.
            text = partial.pop(who, b"") + chunk.data
            *lines, rest = text.split(b"\n")
            for line in lines:
                click.echo(tag + line.decode("utf-8", "replace"))
            if rest:
                partial[who] = rest
        for (s, r, n), rest in sorted(partial.items()):
            tag = f"{s} {r}/{n} | " if prefix else ""
            click.echo(tag + rest.decode("utf-8", "replace"))
        for note in silent_workers(await c.job(whole), site, wrote):
            click.echo(note, err=True)

    with_client(study, actor, body)


def silent_workers(job: JobState, site: str | None,
                   wrote: set[tuple[str, str, int]]) -> list[str]:
    """Why `cairn job logs` printed nothing for some (or all) of the job's workers."""
    workers = [w for w in job.workers.values() if not site or w.site == site]
    if not job.workers:
        return [f"note: job {job.job} has no workers yet (it is {job.state}): nothing was "
                "launched, so there is no log"]
    if not workers:
        where = ", ".join(sorted({w.site for w in job.workers.values()}))
        return [f"note: no worker of job {job.job} ran at {site}; its workers ran at {where}"]
    notes = []
    for w in sorted(workers, key=lambda w: (w.site, w.role, w.rank)):
        if (w.site, w.role, w.rank) in wrote:
            continue
        who = f"{w.site} {w.role}/{w.rank}"
        if not w.launch_id:
            why = f"{w.cause}: {w.message}" if w.cause else w.state
            notes.append(f"note: {who} was never launched ({why}), so it has no log")
        elif w.state == "exited":
            notes.append(f"note: {who} wrote nothing to stdout or stderr (exit {w.exit_code}); "
                         f"what it reported through the SDK is in `cairn job show {job.job}`")
        else:
            notes.append(f"note: {who} has written nothing yet ({w.state}); --follow waits "
                         "for its output")
    return notes


def _start(start: Callable[[Client], Awaitable[str]], watch: bool, timeout: float | None,
           study: str | None, actor: str | None, output: str) -> None:
    """Start a job (submit or rerun): print its id, or with `watch` follow it to its end."""

    async def body(c: Client) -> JobState | str:
        job_id = await start(c)
        if not watch:
            return job_id
        click.echo(job_id, err=output != "table")
        return await _wait(c, job_id, timeout, output)

    result = with_client(study, actor, body)
    if isinstance(result, str):
        emit({"job": result}, output, lambda d: click.echo(d["job"]))
        return
    _finish(result, output)


@job.command(help="Write a job folder NAME/ from a template that submits as it is: "
                  + jobnew.describe() + ".")
@click.argument("name")
@click.option("--template", type=click.Choice(jobnew.template_names()), default="script",
              show_default=True, help="What the job does.")
@click.option("--dir", "parent", type=click.Path(file_okay=False, path_type=Path),
              default=Path("."), show_default=True, help="Where to create the NAME folder.")
@output_option()
def new(name: str, template: str, parent: Path, output: str) -> None:
    folder = parent / name
    written = jobnew.write_job(name, template, folder)
    data = {"job": name, "template": template, "folder": str(folder),
            "files": [str(p) for p in written]}

    def table(d: dict[str, object]) -> None:
        for path in written:
            click.echo(f"wrote {path}")
        click.echo(f"submit it: cairn job submit {folder / 'job.yaml'} --watch")

    emit(data, output, table)
