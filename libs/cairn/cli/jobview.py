"""How a job looks to people: its table of workers, live while it runs, and its verdict."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import click

from cairn.cli.output import print_table
from cairn.errors import CairnError
from cairn.state.job import JobState, WorkerState

STATE_STYLE = {
    "completed": "green",
    "running": "cyan",
    "failed": "red",
    "aborted": "yellow",
    "unschedulable": "red",
    "rejected": "red",
    "exited": "white",
}


def _progress(w: WorkerState) -> str:
    if w.step is None:
        return w.progress
    total = f"/{w.total}" if w.total else ""
    return f"{w.step}{total} {w.progress}".strip()


def _metrics(w: WorkerState) -> str:
    return " ".join(f"{k}={v:.4g}" for k, v in sorted(w.metrics.items()))


def _outcome(w: WorkerState) -> str:
    if w.state == "exited":
        return f"code={w.exit_code}" + (f" {w.cause}" if w.cause else "")
    if w.state == "rejected":
        return f"{w.cause}: {w.message}"
    return w.message


def worker_rows(job: JobState) -> list[tuple[str, ...]]:
    return [
        (w.site, w.role, str(w.rank), w.state, _progress(w), _metrics(w), _outcome(w))
        for _, w in sorted(job.workers.items())
    ]


WORKER_COLUMNS = ("site", "role", "rank", "state", "progress", "metrics", "outcome")


def headline(job: JobState) -> str:
    why = f" cause={job.cause}" if job.cause else ""
    msg = f": {job.message}" if job.message else ""
    return f"job {job.job} ({job.name}) {job.state}{why}{msg}"


def ending_note(job: JobState) -> str | None:
    """While a job waits for its workers after its server role finished: what it waits for."""
    if job.terminal or job.ending_at is None:
        return None
    waiting = [w.key for w in job.still_running()]
    if not waiting:
        return None
    return (f"the server role finished at {job.ending_at:%H:%M:%S}: waiting up to "
            f"{job.spec.end_grace_s:g}s for {', '.join(waiting)} to exit (then they are "
            "stopped, cause outlived-server)")


def renderable(job: JobState) -> Any:
    """A rich table of the job's workers, titled with the job's state."""
    from rich.table import Table

    style = STATE_STYLE.get(job.state, "bold")
    table = Table(
        title=f"{job.job} {job.name} [{style}]{job.state}[/]",
        title_justify="left",
        header_style="bold",
    )
    for column in WORKER_COLUMNS:
        table.add_column(column)
    for row in worker_rows(job):
        table.add_row(*row[:3], f"[{STATE_STYLE.get(row[3], 'white')}]{row[3]}[/]", *row[4:])
    if not job.workers:
        reasons = "; ".join(f"{k}: {v}" for k, v in sorted(job.reasons.items()))
        table.caption = reasons or "waiting for dispatch"
    elif (note := ending_note(job)) is not None:
        table.caption = note
    return table


def print_job(job: JobState) -> None:
    """`cairn job show`: headline, workers, results."""
    click.echo(headline(job))
    click.echo(
        f"submitted {job.submitted_at:%Y-%m-%d %H:%M:%S} by {job.actor or '?'}"
        + (f"; rerun of {job.spec.rerun_of}" if job.spec.rerun_of else "")
        + (f"; code {job.spec.code_digest[:12]}" if job.spec.code_digest else "")
    )
    if job.reasons:
        for site, reason in sorted(job.reasons.items()):
            click.echo(f"  {site}: {reason}")
    if (note := ending_note(job)) is not None:
        click.echo(note)
    if job.workers:
        print_table("workers", WORKER_COLUMNS, worker_rows(job))
    if job.results:
        print_table(
            "results",
            ["site", "role", "rank", "value", "files"],
            [
                (
                    r.site,
                    r.role,
                    r.rank,
                    r.value,
                    ", ".join(f"{f.name} ({f.digest[:12]})" for f in r.files),
                )
                for r in job.results
            ],
        )


def print_jobs(jobs: list[JobState]) -> None:
    print_table(
        None,
        ["job", "name", "state", "submitted", "actor", "workers"],
        [
            (
                j.job,
                j.name,
                j.state,
                f"{j.submitted_at:%Y-%m-%d %H:%M:%S}",
                j.actor or "",
                _worker_summary(j),
            )
            for j in jobs
        ],
    )


def _worker_summary(job: JobState) -> str:
    counts: dict[str, int] = {}
    for w in job.workers.values():
        counts[w.state] = counts.get(w.state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


async def show_live(states: AsyncIterator[JobState]) -> JobState:
    """Redraw the job's table on every change; returns the last state seen."""
    from rich.console import Console
    from rich.live import Live

    last: JobState | None = None
    console = Console()
    with Live(console=console, auto_refresh=False) as live:
        async for state in states:
            last = state
            live.update(renderable(state), refresh=True)
    if not console.is_terminal:
        console.line()  # off a terminal, Live leaves the cursor after the table
    assert last is not None
    return last


def verdict(job: JobState) -> None:
    """Exit 0 for a completed job, 1 (one line saying why) for any other end."""
    if job.state != "completed":
        raise CairnError(headline(job))
