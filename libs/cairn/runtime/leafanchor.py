"""Interest anchors: what lets a site's events cross its leaf link into the streams.

A leaf node forwards a message only where the federation told it someone listens, and the
federation tells a leaf only of subscriptions its credential could publish on. A stream's
own interest is its subjects (`cairn.study.demo.>`), and nats-server (2.15) does not match
that against a site's rights when they hold a wildcard token
(`cairn.study.demo.job.*.site.site-a.accepted`): the leaf never learns that the stream
listens, and a site's events would stop at its leaf. This process, connected as the hub,
subscribes to exactly the subjects each leaf site may publish into streams (derived from the
subject table, as the site's broker rights are), which the federation does pass on; what
arrives here is dropped (the streams store it).

Membership is followed live (`cairn.runtime._studywatch`): a study created, or a leaf site
added to one, gets its anchors within seconds; a site removed loses them.

Run by `cairn up --leaf-sites`:
`python -m cairn.runtime.leafanchor --federation federation.yaml --site site-a ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Mapping
from typing import Any

from cairn.bus import Bus
from cairn.runtime import context
from cairn.runtime._studywatch import StudyWatch, seeded
from cairn.state.study import StudyState

log = logging.getLogger("cairn.runtime.leafanchor")


STORED = ("cairn.", "$KV.", "$O.")
"""What a site publishes into streams: events, and writes to buckets and object stores (the
leaf is not told of a bucket's interest either)."""


def anchored_subjects(site: str, studies: Mapping[str, StudyState],
                      hub: str = "hub") -> list[str]:
    """The subjects `site` may publish into streams, as its broker rights name them now, that
    the anchor (connected as the hub site `hub`) may subscribe to. The others are the hub's
    own buckets and the site's request subjects: the broker refuses the hub a subscription
    there, and none needs an anchor (their rights hold no wildcard the leaf fails to match,
    or nothing stores them)."""
    from cairn.trust.credentials import Identity, Kind
    from cairn.trust.permissions import Membership, covers, derive, holder_of, inbox_prefix

    membership = {name: Membership(sites=frozenset(s.sites), admins=frozenset(s.admins))
                  for name, s in studies.items()}
    inbox = inbox_prefix("anchor")
    pub = derive(holder_of(Identity(kind=Kind.SITE, name=site, site=site), membership),
                 inbox).pub_allow
    sub = derive(holder_of(Identity(kind=Kind.HUB, name=hub, site=hub), membership),
                 inbox).sub_allow
    return [p for p in pub if p.startswith(STORED) and any(covers(s, p) for s in sub)]


async def _drop(_msg: object) -> None:
    return None


class Anchors:
    """The anchor subscriptions of `sites`, kept to what their rights name now."""

    def __init__(self, bus: Bus, sites: list[str], hub: str = "hub") -> None:
        self.bus = bus
        self.sites = sites
        self.hub = hub
        self.subs: dict[str, Any] = {}
        self._lock = asyncio.Lock()

    async def sync(self, studies: Mapping[str, StudyState], *,
                   ahead: bool = False) -> tuple[int, int]:
        """Subscribe what is missing, unsubscribe what is no longer named; (added, dropped).

        `ahead`: membership changed since this connection was made, and its rights may not
        name the new subjects yet (the authority renews it a moment after a study is
        created); a refusal until then is expected, and the client subscribes again on
        the renewal."""
        async with self._lock:
            want = {s for site in self.sites for s in anchored_subjects(site, studies, self.hub)}
            added = sorted(want - set(self.subs))
            dropped = sorted(set(self.subs) - want)
            for subject in added:
                self.subs[subject] = await self.bus.subscribe_core(subject, _drop, ahead=ahead)
            for subject in dropped:
                await self.subs.pop(subject).unsubscribe()
            await self.bus.nc.flush()
            return len(added), len(dropped)


async def run(url: str, creds: str | None, tls_ca: str | None, sites: list[str],
              federation: str) -> int:
    from cairn.spec.federation import load_federation

    tls = context.tls_context(tls_ca, None, None) if tls_ca else None
    bus = await Bus.connect(url, name="cairn-leaf-anchors", creds=creds, tls=tls,
                            retry_for=30.0)
    fed = load_federation(federation)
    anchors = Anchors(bus, sites, fed.hub)
    changes: asyncio.Queue[None] = asyncio.Queue()
    watch = StudyWatch(bus, seeded(fed),
                       changed=lambda: changes.put_nowait(None))
    await watch.start()
    await anchors.sync(watch.studies)  # what `changes` holds by now is in this one
    log.info("anchored %d subjects of %d leaf site(s) in %d studies", len(anchors.subs),
             len(sites), len(watch.studies))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def follow() -> None:
        while True:
            await changes.get()
            added, dropped = await anchors.sync(watch.studies, ahead=True)
            if added or dropped:
                # Not "anchored ...": that line says a start is done (`_leafsites`).
                log.info("membership changed: %d subjects more, %d dropped (%d in %d studies)",
                         added, dropped, len(anchors.subs), len(watch.studies))

    tasks = [asyncio.create_task(follow()), asyncio.create_task(watch.run(stop))]
    await asyncio.wait([asyncio.ensure_future(stop.wait()),
                        asyncio.ensure_future(bus.lost.wait()), *tasks],
                       return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await bus.close()
    return 0 if stop.is_set() else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cairn.runtime.leafanchor",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--nats-url", required=True)
    p.add_argument("--creds")
    p.add_argument("--tls-ca")
    p.add_argument("--site", action="append", required=True, help="a site on a leaf node")
    p.add_argument("--federation", required=True,
                   help="federation.yaml: the studies known from the start")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s "
                        "%(message)s")
    return asyncio.run(run(a.nats_url, a.creds, a.tls_ca, a.site, a.federation))


if __name__ == "__main__":
    sys.exit(main())
