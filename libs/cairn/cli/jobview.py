"""How a job looks to people: its table of workers, live while it runs, and its verdict."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import click

from cairn.cli.output import Column, print_table, yaml_text
from cairn.cli.tables import build
from cairn.errors import CairnError
from cairn.state.job import JobResult, JobState, WorkerState

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


WORKER_COLUMNS = (Column("site", keep=True), Column("role", keep=True), Column("rank"),
                  Column("state"), Column("progress", wrap=True),
                  Column("metrics", wrap=True), Column("outcome", wrap=True))
JOB_COLUMNS = (Column("job", keep=True), Column("name", keep=True), Column("state"),
               Column("submitted"), Column("actor"), Column("workers", wrap=True))


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


def renderable(job: JobState, room: int) -> tuple[Any, int]:
    """A rich table of the job's workers, titled with the job's state, fitted to `room`
    columns; and the width it needs."""
    from rich.text import Text

    style = STATE_STYLE.get(job.state, "bold")
    rows = [(*row[:3], Text(row[3], style=STATE_STYLE.get(row[3], "white")), *row[4:])
            for row in worker_rows(job)]
    caption = None
    if not job.workers:
        reasons = "; ".join(f"{k}: {v}" for k, v in sorted(job.reasons.items()))
        caption = reasons or "waiting for dispatch"
    elif (note := ending_note(job)) is not None:
        caption = note
    title = Text.assemble(f"{job.job} {job.name} ", (job.state, style))
    return build(title, WORKER_COLUMNS, rows, room, caption=caption)


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
        # Values are whatever the job sent: shown as YAML, as `-o yaml` would, not squeezed
        # into a table cell.
        click.echo("results:")
        click.echo(_indent(yaml_text([_result(r) for r in job.results])))
        for r in job.results:
            matrix = r.value.get(CROSS_SITE) if isinstance(r.value, dict) else None
            if isinstance(matrix, dict):
                print_cross_site(matrix)


CROSS_SITE = "cross_site_evaluation"
"""The key of a result value that holds a cross-site evaluation matrix
(`cairn.worker.workflows.crosssite`): `cairn job show` draws it as a table too."""


def print_cross_site(matrix: dict[str, Any]) -> None:
    """The matrix as a table: a row per evaluating site, a column per model, each cell
    that site's first metric of that model (the YAML above has them all)."""
    raw_models, scores = matrix.get("models"), matrix.get("scores")
    if not isinstance(raw_models, list) or not raw_models or not isinstance(scores, dict):
        return
    models = [str(m) for m in raw_models]

    def cell(row: Any, model: str, metric: str) -> str:
        value = row.get(model) if isinstance(row, dict) else None
        number = value.get(metric) if isinstance(value, dict) else None
        ok = isinstance(number, int | float) and not isinstance(number, bool)
        return f"{number:.4f}" if ok else "-"

    metric = next((str(k) for row in scores.values() if isinstance(row, dict)
                   for value in row.values() if isinstance(value, dict) for k in value), "")
    rows = [(str(site), *(cell(row, m, metric) for m in models))
            for site, row in sorted(scores.items(), key=lambda item: str(item[0]))]
    missing = matrix.get("missing")
    caption = "; ".join(f"{s}: {why}" for s, why in sorted(missing.items(), key=str)) \
        if isinstance(missing, dict) and missing else None
    print_table(f"cross-site evaluation ({metric or 'no metrics'}: rows evaluate, columns "
                "are models)", [Column("site", keep=True), *(Column(m, keep=True)
                                                             for m in models)],
                rows, caption=caption)


def _result(r: JobResult) -> dict[str, Any]:
    out: dict[str, Any] = {"site": r.site, "role": r.role, "rank": r.rank, "value": r.value}
    if r.files:
        out["files"] = [{"name": f.name, "sha256": f.digest, "size": f.size} for f in r.files]
    return out


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip().splitlines())


def print_jobs(jobs: list[JobState]) -> None:
    print_table(
        None,
        JOB_COLUMNS,
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
    room = console.width
    with Live(console=console, auto_refresh=False) as live:
        async for state in states:
            last = state
            table, needs = renderable(state, room)
            if needs > console.width:
                console.width = needs
            live.update(table, refresh=True)
    if not console.is_terminal:
        console.line()  # off a terminal, Live leaves the cursor after the table
    assert last is not None
    return last


def verdict(job: JobState) -> None:
    """Exit 0 for a completed job, 1 (one line saying why) for any other end."""
    if job.state != "completed":
        raise CairnError(headline(job))
