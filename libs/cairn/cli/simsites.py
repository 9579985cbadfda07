"""`cairn sim-sites --sites N --jobs M`: one coordinator driven by N simulated sites."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cairn.cli.output import emit, output_option

HELP = """Drive one real coordinator with N simulated sites and M jobs, and check it.

\b
A secure federation in --dir (a private nats-server, the authority, the
coordinator) whose N sites are simulated: each site is its own identity with
its own credential and heartbeats as a site does, but its agent and launcher
are one cheap object and its workers are fakes that send the events a real
worker's site sends (accepted, launching, running, exited; with
--worker-reports also progress and result, on a job-lifetime worker
credential). --sites-per-process sites share one process.

\b
With --backlog B, once the coordinator sees every site's capacity, the
study's queue is held, B jobs are submitted and queued, and the queue is
released: the coordinator's dispatch rate on a backlog (release to last
dispatch). Then M one-worker jobs flow, spread over the sites: their decision
latency (submitted to dispatched). At the end every job must have completed
and the coordinator's state must equal the fold of the study's stream.
Example:
  cairn sim-sites --sites 1000 --backlog 2000 --jobs 500 --no-worker-reports

\b
Progress goes to stderr, the report to stdout. --dir is cleared at the start.
Secure by default; --insecure is for development only and says so. Exit 0 if
every job completed and the state equals the replay, 1 if not, 3 for a bad
flag, 6 if a run already uses --dir, 8 if the jobs did not end in --timeout.
"""


@click.command(help=HELP)
@click.option("--sites", "n_sites", type=int, default=100, show_default=True,
              help="How many simulated sites (besides the hub).")
@click.option("--jobs", "n_jobs", type=int, default=100, show_default=True,
              help="One-worker jobs that flow while the sites are open.")
@click.option("--backlog", type=int, default=0, show_default=True,
              help="Jobs queued while the study's queue is held, then released at once.")
@click.option("--worker-reports/--no-worker-reports", default=True, show_default=True,
              help="Simulated workers connect with their own credential and report "
                   "progress and a result.")
@click.option("--run-s", type=float, default=0.0, show_default=True, metavar="SECONDS",
              help="How long each simulated worker runs.")
@click.option("--heartbeat", "heartbeat_s", type=float, default=2.0, show_default=True,
              metavar="SECONDS", help="Seconds between a site's heartbeats.")
@click.option("--sites-per-process", type=click.IntRange(2, 5000), default=250,
              show_default=True, help="Simulated sites served by one process.")
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".cairn-sim-sites"), show_default=True,
              help="The federation's folder (cleared at the start).")
@click.option("--timeout", type=float, default=1800.0, show_default=True, metavar="SECONDS",
              help="Give up (exit 8) if the jobs have not ended by then.")
@click.option("--insecure", is_flag=True,
              help="DEVELOPMENT ONLY: no TLS, no authentication, no authorization.")
@output_option()
def sim_sites(n_sites: int, n_jobs: int, backlog: int, worker_reports: bool, run_s: float,
              heartbeat_s: float, sites_per_process: int, folder: Path, timeout: float,
              insecure: bool, output: str) -> None:
    from cairn.runtime.manysites import run_many_sites
    from cairn.runtime.secure import INSECURE_WARNING

    if insecure:
        click.echo(INSECURE_WARNING, err=True)

    def say(line: str) -> None:
        click.echo(f"sim-sites: {line}", err=True)

    report = run_many_sites(folder, n_sites, n_jobs, backlog=backlog, secure=not insecure,
                            heartbeat_s=heartbeat_s, run_s=run_s,
                            worker_reports=worker_reports,
                            sites_per_process=sites_per_process, timeout=timeout, say=say)
    emit(report.as_dict(), output, _table)
    if report.not_completed or not report.state_equals_replay:
        raise SystemExit(1)


def _table(d: dict[str, Any]) -> None:
    mib = 1024 * 1024
    lines = [
        ("sites", f"{d['sites']} simulated + hub ({'secure' if d['secure'] else 'INSECURE'},"
                  f" {d['processes']} processes)"),
        ("jobs", f"{d['completed']} of {d['backlog'] + d['jobs']} completed"
                 + (f"; not: {len(d['not_completed'])}" if d["not_completed"] else "")),
        ("state equals replay", "yes" if d["state_equals_replay"] else "NO"),
        ("federation start", f"{d['start_s']:.1f}s"),
        ("backlog dispatch", f"{d['dispatch_per_s']:.0f} jobs/s (first "
         f"{d['release_to_first_ms']:.0f} ms after the release)" if d["backlog"] else "-"),
        ("flowing dispatch", f"{d['flow_dispatch_per_s']:.0f} jobs/s"),
        ("decision latency", f"p50 {d['decision_p50_ms']:.1f} ms, "
                             f"p99 {d['decision_p99_ms']:.1f} ms"),
        ("coordinator", f"{d['coordinator_cpu_s']:.1f} s CPU, "
                        f"{d['coordinator_rss_bytes'] / mib:.0f} MiB RSS, "
                        f"{d['coordinator_idle_cpu_pct']:.1f}% of a core idle"),
        ("folder", d["dir"]),
    ]
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        click.echo(f"{key:<{width}}  {value}")
