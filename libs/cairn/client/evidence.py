"""Evidence through a client session: the latest bundle of a site and recipe, the bundles of
a recipe, eligibility, submissions to the signer, and a job's dispatch receipts.

    async with await Client.connect() as c:
        files = await c.evidence.latest("site-a", "cpu-linux-process")
        accepted = await c.evidence.submit(packed_bundle)
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from cairn import api, subjects
from cairn.bus import Bus
from cairn.errors import InvalidInput, NotFound
from cairn.events import JobSubmitted
from cairn.evidence.bundle import BundleFiles
from cairn.evidence.eligibility import Eligibility
from cairn.evidence.receipts import job_receipts
from cairn.evidence.status import eligibility
from cairn.evidence.store import fetch_bundle, latest, recorded
from cairn.evidence.trust import TrustList

Call = Callable[[str, api.Request], Awaitable[api.Result]]


class EvidenceClient:
    """The evidence verbs of a `Client` (`client.evidence`)."""

    def __init__(self, bus: Bus, call: Call) -> None:
        self._bus = bus
        self._call = call

    async def latest(self, site: str, recipe: str) -> BundleFiles:
        """The newest evidence bundle for `site` and `recipe`, fetched whole."""
        found = await latest(self._bus, site, recipe)
        if found is None:
            raise NotFound(f"no evidence for {site} and {recipe}", field="site")
        return await fetch_bundle(self._bus, found.bundle)

    async def bundles(self, recipe: str) -> list[tuple[str, BundleFiles]]:
        """Every recorded bundle of `recipe`, each with its object name."""
        return [(f"evidence/{e.bundle}", await fetch_bundle(self._bus, e.bundle))
                for e in await recorded(self._bus, recipe=recipe)]

    async def eligibility(self, trust: TrustList, *, now: datetime, **options: Any
                          ) -> list[Eligibility]:
        """Per site and recipe: eligible or not, why, since and until when."""
        return await eligibility(self._bus, trust, now=now, **options)

    async def submit(self, packed: bytes) -> api.EvidenceAccepted:
        """Hand a signed bundle (a packed tarball) to the signer, which checks and stores it."""
        request = api.EvidenceSubmit(bundle_b64=base64.b64encode(packed).decode())
        result = await self._call(subjects.api_validation("evidence-submit"), request)
        if not isinstance(result, api.EvidenceAccepted):
            raise InvalidInput(f"unexpected answer: a {type(result).__name__} result")
        return result

    async def receipts(self, study: str, job: str, trust: TrustList
                       ) -> tuple[JobSubmitted | None, list[dict[str, Any]]]:
        """The job's submission (None: no such job) and each dispatch of `job` with its
        receipt checked against `trust` (`cairn.evidence.receipts`)."""
        return await job_receipts(self._bus, study, job, trust)
