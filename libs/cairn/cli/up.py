"""`cairn up` and `cairn down`: an embedded federation on this machine."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import click

from cairn.errors import CairnError, NotFound
from cairn.runtime import context, phases
from cairn.runtime.dirlock import read_holder, stop_leftovers
from cairn.runtime.embedded import (
    DEFAULT_SITES,
    DEFAULT_STUDY,
    EmbeddedFederation,
    api_installed,
)
from cairn.runtime.secure import INSECURE_WARNING
from cairn.runtime.supervise import Supervisor, remember_port, remembered_port
from cairn.runtime.watchdog import Watchdog


@click.command(help="""Start an embedded federation: a private nats-server with JetStream, the
coordinator, and for a hub and two sites an agent and a launcher (one process per site).

Writes the context file (.cairn/context.yaml or $CAIRN_CONTEXT) that every other command
reads, prints where everything runs, and stops it all on Ctrl-C or `cairn down`.
A parent, a leaf node or the nats-server that dies is restarted, with backoff and a line saying so;
an existing --dir keeps the NATS port it had (docs/operate-embedded.md).
With --check it starts, waits until every service is healthy, prints how long that took,
stops, and exits 0.

One per --dir: another `cairn up` there (--check too) is refused at once with exit 6, naming
the running one's pid and NATS URL, and changes nothing of it.

Secure by default: TLS, a throwaway PKI and one credential per participant under
DIR/trust (kits in DIR/trust/kits), and the authority deciding what each may do at the
broker. --insecure turns all of that off, for development only, and says so on every start.

--cluster N runs N nats-servers on loopback routed into one cluster (TLS between them too,
the authority's callout on each), gives every client all N URLs so it fails over, and keeps
min(3, N) copies of every stream and bucket ($CAIRN_REPLICAS overrides); a member that dies
is restarted on its same ports while the others serve (docs/scale.md).""")
@click.option("--dir", "dir_", type=click.Path(path_type=Path), default=Path(".cairn"),
              show_default=True, help="Configs, stores and logs live here (kept between runs).")
@click.option("--site", "sites", multiple=True, help="Site names; the first is the hub. "
              f"Default: {', '.join(DEFAULT_SITES)}.")
@click.option("--study", default=DEFAULT_STUDY, show_default=True, help="The demo study.")
@click.option("--port", type=int, default=0,
              help="NATS port (default: the one this --dir used before, else a free one).")
@click.option("--check", is_flag=True, help="Start, wait for health, report, stop.")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to wait for every service to be healthy.")
@click.option("--insecure", is_flag=True,
              help="DEVELOPMENT ONLY: no TLS, no authentication, no authorization.")
@click.option("--api/--no-api", "api", default=None,
              help="Run the HTTP API and dashboard (docs/api.md) in the hub's parent "
                   "(default: when the `api` extra is installed).")
@click.option("--api-port", type=int, default=0,
              help="The HTTP API's port (default: a free one; the context file says which).")
@click.option("--cluster", "cluster", type=click.IntRange(1, 7), default=1, show_default=True,
              metavar="N", help="nats-servers in one cluster (3 survives the loss of any one; "
                                "1: a single server). Secure only.")
@click.option("--leaf-sites", is_flag=True,
              help="Give every site but the hub its own leaf-node nats-server that dials the "
                   "federation with the site's credential; the site's parent connects to it "
                   "(docs/scale.md, \"Sites on leaf nodes\"); with --cluster, every server "
                   "takes leaves. Not with --insecure.")
@click.option("--standby", is_flag=True,
              help="Also run a standby coordinator, validator and signer that wait behind "
                   "their leases and take over within seconds when the active ones die or "
                   "hang (docs/scale.md).")
@click.option("--payload-grace", "payload_grace", type=click.FloatRange(min=0), default=None,
              metavar="SECONDS",
              help="How long a job's data-plane payloads outlive the job before the "
                   "coordinator deletes them (default 3600; docs/scale.md).")
def up(dir_: Path, sites: tuple[str, ...], study: str, port: int, check: bool,
       timeout: float, insecure: bool, api: bool | None, api_port: int, cluster: int,
       leaf_sites: bool, standby: bool, payload_grace: float | None) -> None:
    from cairn.names import check_name

    for s in (*sites, study):
        check_name(s, "site" if s in sites else "study")
    t0 = time.monotonic()
    if api and not api_installed():
        raise click.UsageError("--api: the HTTP API is not installed (pip install "
                               "'cairn[api]', or `make install`)")
    fed = EmbeddedFederation(dir=dir_, sites=sites or DEFAULT_SITES, study=study,
                             port=port or remembered_port(dir_), secure=not insecure,
                             api=api_installed() if api is None else api, api_port=api_port,
                             cluster_size=cluster, standby=standby)
    if cluster > 1 and insecure:
        raise click.UsageError("--cluster runs only secure (TLS between the servers, the "
                               "authority on each): drop --insecure")
    if leaf_sites and insecure:
        raise click.UsageError("--leaf-sites needs the secure federation (a leaf node dials "
                               "out with its site's credential): drop --insecure")
    fed.leaf_sites = leaf_sites
    if payload_grace is not None:
        fed.hub_options["payload_grace_s"] = f"{payload_grace:g}"
    if insecure:
        click.echo(INSECURE_WARNING, err=True)
    stopping = {"flag": False}

    def on_signal(signum: int, frame: object) -> None:
        # Once: a second signal while the federation stops must not cut the stop short
        # (that would leave nats-server and parents running, unowned).
        if stopping["flag"]:
            return
        stopping["flag"] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        # No event loop runs yet: the parents can be forked from this process, which
        # imports them once instead of once per parent.
        fed.start(fork=True)
        assert fed.nats is not None
        remember_port(dir_, fed.nats.port)
        took = asyncio.run(fed.wait_healthy(timeout))
        total = time.monotonic() - t0
        phases.mark("up.healthy")
        if check:
            click.echo(f"healthy: {len(fed.expected())} services at {len(fed.sites)} sites in "
                       f"{took:.3f}s ({total:.3f}s from start)")
            return
        path = fed.write_context()
        _print_where(fed, path, total)
        supervisor = Supervisor(fed, say=lambda line: click.echo(line, err=True),
                                watchdog=Watchdog(fed))
        while True:
            supervisor.check()
            time.sleep(0.5)
    except KeyboardInterrupt:
        click.echo("stopping...", err=True)
    finally:
        fed.stop()
        phases.mark("up.stopped")
        if not check:
            _clear_context(fed)


def _print_where(fed: EmbeddedFederation, path: Path, took: float) -> None:
    assert fed.nats is not None
    click.echo(f"Cairn federation up in {took:.2f}s (Ctrl-C or `cairn down` stops it)")
    for member in fed.nats_members():
        click.echo(f"  nats        {member.url}  (monitor {member.monitor_url})")
    click.echo(f"  context     {path}")
    if fed.api_url:
        click.echo(f"  api         {fed.api_url}/v1  dashboard {fed.api_url}/  "
                   "(`cairn api token`; docs/api.md)")
    elif not api_installed():
        click.echo("  api         not installed: pip install 'cairn[api]' for the HTTP API "
                   "and dashboard")
    if fed.trust is not None:
        click.echo(f"  security    TLS + authority; kits in {fed.trust.dir / 'kits'} "
                   "(docs/security.md)")
    else:
        click.echo(f"  security    {INSECURE_WARNING}")
    click.echo(f"  study       {fed.study} (actor {context.load(path).actor})"  # type: ignore[union-attr]
               if context.load(path) else "")
    for p in fed.processes:
        click.echo(f"  {p.name:<11} pid {p.proc.pid:<7} {'+'.join(p.services):<20} log {p.log}")
    click.echo(f"  files       {fed.federation_file}, {fed.dir / 'sites'}/<site>/site.yaml")
    sys.stdout.flush()


def _clear_context(fed: EmbeddedFederation) -> None:
    path = context.context_path()
    ctx = context.load(path, required=False) if path.exists() else None
    if ctx is not None and ctx.up_pid == os.getpid():
        path.unlink(missing_ok=True)


@click.command(help="""Stop the embedded federation that `cairn up` started: the one the context
file names (.cairn/context.yaml or $CAIRN_CONTEXT), or the one in --dir.

If that `cairn up` is gone (killed with -9) but what it started still runs (the nats-server,
the parents), those are stopped instead; a new `cairn up` in that directory refuses to start
until they are.""")
@click.option("--dir", "dir_", type=click.Path(path_type=Path), default=None,
              help="The federation's --dir (default: the context file's).")
@click.option("--timeout", type=float, default=20.0, show_default=True)
def down(dir_: Path | None, timeout: float) -> None:
    path = context.context_path()
    up_pid: int | None = None
    if dir_ is None:
        ctx = context.load(path, required=False) if path.exists() else None
        if ctx is None or ctx.up_pid is None:
            raise NotFound(f"no running federation recorded in {path} (--dir names one)")
        up_pid, dir_ = ctx.up_pid, Path(ctx.dir) if ctx.dir else None
    holder = read_holder(dir_) if dir_ is not None else None
    if holder is not None and holder.running():
        up_pid = holder.pid
    elif holder is not None and (left := holder.leftovers()):
        stop_leftovers(left, timeout)
        click.echo("stopped what an earlier cairn up left running: "
                   + ", ".join(f"{s.name} (pid {s.pid})" for s in left))
        _forget_context(path, holder.pid)
        return
    elif holder is not None or up_pid is None:
        _forget_context(path, up_pid)
        raise NotFound(f"no cairn up runs in {dir_}")
    assert up_pid is not None
    try:
        os.kill(up_pid, signal.SIGTERM)
    except ProcessLookupError:
        _forget_context(path, up_pid)
        raise NotFound(f"cairn up (pid {up_pid}) is not running; removed {path}") from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(up_pid, 0)
        except ProcessLookupError:
            click.echo("federation stopped")
            return
        time.sleep(0.1)
    raise CairnError(f"cairn up (pid {up_pid}) did not stop within {timeout:g}s")


def _forget_context(path: Path, up_pid: int | None) -> None:
    """Remove the context file if it names the `cairn up` that is gone."""
    ctx = context.load(path, required=False) if path.exists() else None
    if ctx is not None and up_pid is not None and ctx.up_pid == up_pid:
        path.unlink(missing_ok=True)
