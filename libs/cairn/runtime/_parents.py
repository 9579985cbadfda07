"""The parents of an embedded federation that are more than one `cairn run` per site: sites
grouped in one process (`cairn sim`), and the warm interpreters `cairn up` forks for the
process launchers before it reads a secret."""

from __future__ import annotations

import subprocess
import sys

from cairn.runtime._fedprocs import Process
from cairn.runtime.embedded import EmbeddedFederation  # imported from its methods
from cairn.runtime.forked import fork_zygote


def spawn_grouped(fed: EmbeddedFederation, *, services: tuple[str, ...] | None = None,
                  options: dict[str, str] | None = None, prefix: str = "sites") -> None:
    """Parents that serve `sites_per_process` sites each, every site as its own identity,
    running `services` (default: the federation's site services) with `options`."""
    from cairn.runtime.sites import parent_plans, write_plan

    assert fed.nats is not None
    (fed.dir / "plans").mkdir(exist_ok=True)
    services = fed.site_services if services is None else services
    plans = parent_plans(fed.sites[1:], fed.sites_per_process, fed.site_config,
                         services=services, nats_url=fed.nats_url,
                         trust=fed.trust, heartbeat_s=fed.heartbeat_s,
                         options=fed.site_options if options is None else options)
    for index, plan in enumerate(plans, 1):
        name = f"{prefix}-{index}"
        path = write_plan(fed.dir / "plans" / f"{name}.json", plan)
        log = fed.dir / "logs" / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cairn.runtime.sites", str(path)], stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=fed._env(),
                start_new_session=True)
        group = tuple(s.site for s in plan.sites)
        fed.processes.append(Process(name, group[0], services, proc, log,
                                     more_sites=group[1:]))


def fork_zygotes(fed: EmbeddedFederation) -> None:
    """A warm interpreter for each site's process launcher, forked now (it shares this
    process's imports page for page) and handed to its parent (`ZYGOTE_FD_ENV`)."""
    from cairn.launcher.backends._warm import enabled_by_env, zygote_env
    from cairn.launcher.backends._zygote import forkable

    if not enabled_by_env() or not forkable() or fed.sites_per_process > 1:
        # Each launcher starts its own, as a spawned parent's does (grouped sites share
        # one per process: `shared_zygote`).
        return
    logs = fed.dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for site in fed.sites:
        if fed.backends.get(site, "process") != "process":
            continue
        env = zygote_env(sys.executable, str((fed.site_dir(site) / "work").resolve()))
        name = "coordinator" if site == fed.hub else f"site-{site}"
        proc, sock = fork_zygote(env, logs / f"{name}.log",
                                 close=list(fed._zygotes.values()))
        fed._zygotes[site] = sock
        fed.zygotes[site] = proc
