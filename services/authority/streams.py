"""The streams and buckets the authority makes for others: no other identity may create
them (see `cairn.trust.permissions`), and each must exist before its first reader starts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from cairn import subjects
from cairn.bus import Bus, kv, objects
from cairn.events import Heartbeat

log = logging.getLogger("cairn.authority")

PREPARE_AT_ONCE = 16
"""Sites whose streams are made concurrently at start."""


class Streams:
    """Makes the federation's, each study's and each site's streams, each once."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._sites: set[str] = set()
        self._making: dict[str, asyncio.Future[None]] = {}
        self._studies: set[str] = set()

    async def federation(self, studies: Iterable[str]) -> None:
        """The federation's own streams and buckets, and each of `studies`'."""
        await self.bus.ensure_federation()
        await kv(self.bus, subjects.KV_SITES, Heartbeat)
        await objects(self.bus, subjects.OBJ_SNAPSHOTS)
        await objects(self.bus, subjects.OBJ_EVIDENCE)
        for study in studies:
            await self.study(study)

    async def sites(self, names: Iterable[str]) -> None:
        """Every named site's streams, PREPARE_AT_ONCE sites at a time, once the authority
        answers: a site's first admission makes its own anyway (`site`), so ten thousand
        sites do not hold up the authority's start."""
        at_once = asyncio.Semaphore(PREPARE_AT_ONCE)

        async def prepare(site: str) -> None:
            async with at_once:
                try:
                    await self.site(site)
                except Exception as exc:  # its first admission tries again
                    log.warning("could not prepare streams of %s: %s", site, exc)

        await asyncio.gather(*(prepare(site) for site in names))

    async def study(self, study: str) -> None:
        if study in self._studies:
            return
        await self.bus.ensure_study(study)
        await objects(self.bus, subjects.obj_artifacts(study))
        self._studies.add(study)

    async def site(self, site: str) -> None:
        """Make `site`'s streams once; concurrent callers for one site share the work."""
        if site in self._sites:
            return
        making = self._making.get(site)
        if making is None:
            making = self._making[site] = asyncio.ensure_future(self._make_site(site))
            making.add_done_callback(lambda _done: self._making.pop(site, None))
        await asyncio.shield(making)

    async def _make_site(self, site: str) -> None:
        await self.bus.ensure_site(site)
        # Made here with the launcher's own bucket settings (the value type only decodes).
        await kv(self.bus, subjects.kv_launches(site), dict)
        self._sites.add(site)
