"""`cairn sim JOB --sites N`: run a job on N simulated sites of this machine."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import click

from cairn.cli.output import emit, output_option

HELP = """Run the job described by JOB (a job.yaml) on N simulated sites of this machine.

\b
The simulation is a real federation in --dir: a private nats-server, the
coordinator, a hub and sites site-1 ... site-N, each with its own agent,
launcher and credential (50 sites to a process, one warm worker interpreter
per process). The job runs as it would on `cairn up`: the same worker code,
the same events in the same stream. Progress goes to stderr; the summary
(job, state, start time, per-round time, peak memory) to stdout.

\b
--setup CMD runs once the sites' folders exist and before the job is
submitted, to give each site its data: {sites_dir} in CMD is the folder of
the site folders (each site's dataset `shared` is SITE/data/shared), {hub}
the hub's name. Example:
  cairn sim examples/fedavg/job.yaml --sites 100 \\
    --setup 'python examples/fedavg/setup_data.py --sites-dir {sites_dir}'

\b
With --keep the federation stays up after the job, with a context file in
--dir, for `cairn job show`, `cairn job logs` and `cairn replay`, until
Ctrl-C. --dir is cleared at the start of each simulation.

Secure by default (TLS, per-site credentials, the authority); --insecure is
for development only and says so. Exit 0 if the job completed, 1 if not, 3 for
a bad job spec or --sites, 6 if a simulation already runs in --dir, 8 if the
job did not end within --timeout.
"""


@click.command(help=HELP)
@click.argument("job_file", metavar="JOB", type=click.Path(path_type=Path))
@click.option("--sites", "n_sites", type=int, default=2, show_default=True,
              help="How many sites to simulate (besides the hub).")
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".cairn-sim"), show_default=True,
              help="The simulated federation's folder (cleared at the start).")
@click.option("--set", "sets", multiple=True, metavar="params.KEY=VALUE",
              help="Set one of the spec's params for this run (repeatable).")
@click.option("--setup", metavar="CMD", help="A command giving the sites their data "
              "({sites_dir}, {hub}); run before the job is submitted.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, metavar="SECONDS",
              help="Give up (exit 8) if the job has not ended by then.")
@click.option("--keep", is_flag=True,
              help="Keep the federation up after the job (Ctrl-C stops it).")
@click.option("--sites-per-process", type=click.IntRange(1, 500), default=50,
              show_default=True, help="Sites whose services share one process.")
@click.option("--insecure", is_flag=True,
              help="DEVELOPMENT ONLY: no TLS, no authentication, no authorization.")
@output_option()
def sim(job_file: Path, n_sites: int, folder: Path, sets: tuple[str, ...], setup: str | None,
        timeout: float, keep: bool, sites_per_process: int, insecure: bool,
        output: str) -> None:
    from cairn.runtime.secure import INSECURE_WARNING
    from cairn.runtime.sim import SimReport, simulate

    if insecure:
        click.echo(INSECURE_WARNING, err=True)

    def say(line: str) -> None:
        click.echo(f"sim: {line}", err=True)

    def hold(report: SimReport) -> None:
        summary(report)
        say(f"the federation stays up: CAIRN_CONTEXT={report.context} cairn job show "
            f"{report.job} (Ctrl-C stops it)")
        stopped = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        try:
            stopped.wait()
        except KeyboardInterrupt:
            pass

    shown: list[bool] = []

    def summary(report: SimReport) -> None:
        if not shown:
            shown.append(True)
            emit(report.as_dict(), output, _table)

    report = simulate(job_file, n_sites, folder, secure=not insecure, sets=sets, setup=setup,
                      timeout=timeout, sites_per_process=sites_per_process,
                      keep=hold if keep else None, say=say)
    summary(report)
    if report.state != "completed":
        raise SystemExit(1)


def _table(d: dict[str, Any]) -> None:
    mib = 1024 * 1024
    rounds = ", ".join(f"{r:.3f}" for r in d["round_s"]) or "-"
    lines = [
        ("job", d["job"]), ("state", d["state"] + (f" ({d['message']})" if d["message"]
                                                   else "")),
        ("sites", f"{d['sites']} + hub ({'secure' if d['secure'] else 'INSECURE'})"),
        ("federation start", f"{d['start_s']:.1f}s"), ("job time", f"{d['job_s']:.1f}s"),
        ("rounds (s)", rounds),
        ("peak memory", f"{d['peak_pss_bytes'] / mib:.0f} MiB PSS, "
                        f"{d['peak_rss_bytes'] / mib:.0f} MiB RSS, "
                        f"{d['peak_processes']} processes"),
        ("folder", d["dir"]),
    ]
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        click.echo(f"{key:<{width}}  {value}")
