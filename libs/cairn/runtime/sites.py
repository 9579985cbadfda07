"""`python -m cairn.runtime.sites PLAN.json`: several sites' services in one process.

What makes a simulated federation of 100 sites cheap (`cairn sim`): one interpreter, one
event loop and one warm worker interpreter (the launchers share it, `_warm.shared_zygote`)
serve many sites, where `cairn up` runs one parent per site. Each site is still its own
identity: its services connect with the site's own credential (the broker allows it only
its own subjects), read its own `site.yaml` and `study_runtime.yaml`, and answer its own
health subject; only the process is shared.

The plan (JSON, written by `EmbeddedFederation`): `{"services": [...], "heartbeat_s": 1.0,
"log_level": "info", "options": {...}, "sites": [{"site", "site_config", "creds",
"tls_ca"}, ...]}`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from cairn.errors import CairnError, InvalidInput
from cairn.runtime.logs import setup_logging
from cairn.runtime.service import ServiceConfig, check_options, run

if TYPE_CHECKING:
    from cairn.runtime.secure import Trust


STARTING_AT_ONCE = 8
"""Sites of one parent that start (connect, make their consumers) at the same time: fifty
at once ask JetStream's API more than it answers within its timeout on a small machine."""


THREADS = 32
RESTARTS = 5
"""Times a site whose services exited with an error is started again."""


class SitePlan(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    site: str
    site_config: str
    nats_url: str
    creds: str | None = None
    tls_ca: str | None = None


class ParentPlan(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    services: list[str]
    sites: list[SitePlan]
    heartbeat_s: float = 1.0
    log_level: str = "info"
    options: dict[str, str] = {}


def parent_plans(sites: Sequence[str], per_process: int, site_config: Callable[[str], Path],
                 *, services: Sequence[str], nats_url: str, trust: Trust | None,
                 heartbeat_s: float, options: dict[str, str]) -> list[ParentPlan]:
    """`sites` cut into parents of `per_process` sites each; each site connects with its
    own credential where the federation is secure."""
    return [ParentPlan(
        services=list(services), heartbeat_s=heartbeat_s, options=dict(options),
        sites=[SitePlan(site=site, site_config=str(site_config(site)), nats_url=nats_url,
                        creds=str(trust.creds(site)) if trust else None,
                        tls_ca=str(trust.ca) if trust else None)
               for site in sites[index:index + per_process]])
        for index in range(0, len(sites), max(1, per_process))]


def write_plan(path: Path, plan: ParentPlan) -> Path:
    path.write_bytes(msgspec.json.encode(plan))
    return path


def load_plan(path: str) -> ParentPlan:
    """Raises: InvalidInput naming the file."""
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=ParentPlan)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidInput(f"not a sites plan: {exc}", file=path) from None


async def run_sites(plan: ParentPlan, stop: asyncio.Event | None = None) -> int:
    """Run `plan.services` for every site of the plan until stopped; the worst exit code."""
    stop = stop or asyncio.Event()
    # asyncio's default pool (cpus + 4 threads) would be shared by every site's blocking
    # steps (a launch prepares its folder, cgroup and code on threads).
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="cairn-sites"))
    options = check_options(plan.services, [f"{k}={v}" for k, v in plan.options.items()])
    configs = [ServiceConfig(nats_url=s.nats_url, site=s.site, site_config=s.site_config,
                             creds=s.creds, tls_ca=s.tls_ca, heartbeat_s=plan.heartbeat_s,
                             log_level=plan.log_level, options=options)
               for s in plan.sites]
    gate = asyncio.Semaphore(STARTING_AT_ONCE)

    async def once(config: ServiceConfig) -> int:
        started = asyncio.Event()
        async with gate:
            task = asyncio.ensure_future(run(plan.services, config, stop, started))
            waiting = asyncio.ensure_future(started.wait())
            await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
        try:
            return await task
        except CairnError as exc:
            print(f"error: site {config.site}: {exc}", file=sys.stderr)
            return exc.exit_code

    async def one(config: ServiceConfig) -> int:
        # As each site's own supervisor would: a site whose services ended with an error
        # (its connection closed for good, JetStream silent through its start) is started
        # again, and the other sites of this process run on meanwhile.
        attempt = 0
        while (code := await once(config)) != 0 and not stop.is_set() and attempt < RESTARTS:
            attempt += 1
            print(f"site {config.site}: its services exited with {code}; starting them "
                  f"again ({attempt} of {RESTARTS})", file=sys.stderr)
            await asyncio.sleep(min(2.0 * attempt, 10.0))
        return code

    codes = await asyncio.gather(*(one(c) for c in configs))
    return max(codes, default=0)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m cairn.runtime.sites PLAN.json", file=sys.stderr)
        return 2
    try:
        plan = load_plan(args[0])
        setup_logging(plan.log_level, "text", "+".join(plan.services),
                      f"{len(plan.sites)}-sites")
        return asyncio.run(run_sites(plan))
    except CairnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
