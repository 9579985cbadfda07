"""`cairn demo`: Cairn's main job end to end on this machine.

An embedded federation (private nats-server, coordinator, a hub and two sites), a study,
per-site data that never leaves its site, the FedAvg job with rounds and accuracy shown live,
the result fetched, a site validated against a CPU recipe, and the replayed timeline.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from cairn.errors import NotFound

REPO = Path(__file__).resolve().parents[3]


def _say(text: str) -> None:
    click.secho(text, bold=True)


def _setup_data(example: Path, sites_dir: Path, hub: str) -> None:
    spec = importlib.util.spec_from_file_location("cairn_demo_setup", example / "setup_data.py")
    if spec is None or spec.loader is None:
        raise NotFound(f"{example / 'setup_data.py'} not found")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write(sites_dir, hub=hub)


def _start(workdir: Path) -> Any:
    from cairn.runtime.embedded import EmbeddedFederation

    fed = EmbeddedFederation(dir=workdir / "fed", heartbeat_s=0.5, secure=True)
    _say("1. Starting an embedded federation (nats-server, coordinator, hub, site-a, site-b)")
    # Before any event loop runs: the parents are forked from this process (cairn.runtime.forked).
    fed.start(fork=True)
    return fed


async def _run(fed: Any, example: Path, out: Path, recipe: str | None, t0: float) -> int:
    from cairn.client import Client
    from cairn.client.timeline import format_line
    from cairn.runtime.context import Context
    from cairn.runtime.embedded import DEFAULT_ADMIN

    took = await fed.wait_healthy(60)
    assert fed.nats is not None
    click.echo(f"   {len(fed.expected())} services healthy in {took:.2f}s at {fed.nats.url}")
    _say("2. Generating each site's own non-IID data (it never leaves the site)")
    _setup_data(example, fed.dir / "sites", fed.hub)
    for site in fed.sites[1:]:
        click.echo(f"   {site}: {fed.site_dir(site) / 'data' / 'shared' / 'fedavg'}")
    client = await Client.connect(Context(nats_url=fed.nats.url, study=fed.study,
                                          actor=DEFAULT_ADMIN, **fed.client_options()))
    try:
        _say(f"3. Submitting {example / 'job.yaml'} to study {fed.study}")
        submitted = time.monotonic()
        job_id = await client.submit(example / "job.yaml")
        click.echo(f"   job {job_id}")
        final = await _watch(client, job_id)
        click.echo(f"   {final.state} in {time.monotonic() - submitted:.2f}s")
        if final.state != "completed":
            click.secho(f"   cause {final.cause}: {final.message}", fg="red")
            return 1
        _say(f"4. Fetching the result into {out}")
        for path in await client.fetch(job_id, out):
            click.echo(f"   {path}")
        for result in final.results:
            value = result.value
            if isinstance(value, dict) and "accuracy" in value:
                rounds = ", ".join(f"{a:.3f}" for a in value["accuracy"])
                click.echo(f"   {result.role}@{result.site}: accuracy per round {rounds}")
        if recipe:
            await _validate(client, fed.sites[1], recipe)
        _say("6. The study's timeline, replayed from its event stream")
        _, timeline = await client.replay(job=job_id)
        for entry in timeline:
            click.echo("   " + format_line(entry))
    finally:
        await client.close()
    click.secho(f"Done in {time.monotonic() - t0:.1f}s.", fg="green", bold=True)
    return 0


async def _watch(client: Any, job_id: str) -> Any:
    shown: set[tuple[str, int | None]] = set()
    states: dict[str, str] = {}
    async for job in client.watch(job_id, poll=0.1, timeout=300):
        for key, worker in sorted(job.workers.items()):
            if states.get(key) != worker.state:
                states[key] = worker.state
                click.echo(f"   {worker.site:<8} {worker.role}/{worker.rank} {worker.state}"
                           + (f" (exit {worker.exit_code})" if worker.state == "exited" else ""))
            accuracy = {k: v for k, v in worker.metrics.items() if "accuracy" in k}
            if accuracy and (key, worker.step) not in shown:
                shown.add((key, worker.step))
                values = ", ".join(f"{k} {v:.3f}" for k, v in sorted(accuracy.items()))
                click.echo(f"   {worker.site:<8} {worker.role} round {worker.step}: {values}")
    return job


async def _validate(client: Any, site: str, recipe: str) -> None:
    _say(f"5. Validating {site} against recipe {recipe} (check jobs run through its launcher)")
    from cairn.client.validation import run_validation

    result = await run_validation(client, site, recipe, timeout=300)
    for phase, item in result.phases.items():
        click.echo(f"   {phase:<12} {item.status:<8} passed {item.passed}, failed {item.failed}, "
                   f"skipped {item.skipped}")
    click.echo(f"   {site} against {recipe}: {result.status} in {result.duration_s:.1f}s")


@click.command(help=__doc__)
@click.option("--dir", "dir_", type=click.Path(path_type=Path), default=None,
              help="Where the federation lives (default: a temporary folder).")
@click.option("--example", type=click.Path(path_type=Path, exists=True, file_okay=False),
              default=REPO / "examples" / "fedavg", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("demo-result"),
              show_default=True, help="Where the fetched result goes.")
@click.option("--recipe", default="cpu-linux-process", show_default=True,
              help="CPU recipe to validate a site against ('' to skip).")
def demo(dir_: Path | None, example: Path, out: Path, recipe: str) -> None:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cairn-demo-") as tmp:
        fed = _start(dir_ if dir_ is not None else Path(tmp))
        try:
            code = asyncio.run(_run(fed, example, out, recipe or None, t0))
        finally:
            fed.stop()
    sys.exit(code)
