"""Eligibility and dashboard inputs read from the bus: every announced bundle fetched and
verified offline, the sites' latest snapshots, then the pure verdicts of `eligibility`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from cairn import subjects
from cairn.bus import Bus, replay
from cairn.errors import CairnError
from cairn.events import (
    FEDERATION_DECODER,
    EvidenceRecorded,
    FederationSeeded,
    FederationSiteAdded,
)
from cairn.evidence.eligibility import Eligibility, EvidenceSlot, VerifiedEvidence, judge
from cairn.evidence.store import fetch_bundle, recorded
from cairn.evidence.trust import TrustList
from cairn.evidence.verify import CheckOutcome, Verification, verify_bundle
from cairn.snapshot import Snapshot, remote

log = logging.getLogger("cairn.evidence")


async def verified(bus: Bus, event: EvidenceRecorded, trust: TrustList,
                   now: datetime) -> VerifiedEvidence:
    """The announced bundle fetched and verified (any age); an unreadable one is invalid."""
    try:
        files = await fetch_bundle(bus, event.bundle)
    except CairnError as exc:
        return VerifiedEvidence(event=event, verification=Verification(
            checks=[CheckOutcome("envelope", False, "not-an-envelope", str(exc))]))
    return VerifiedEvidence(event=event, verification=verify_bundle(files, trust, now=now))


async def slots(bus: Bus, trust: TrustList, *, now: datetime, site: str | None = None,
                recipe: str | None = None) -> dict[tuple[str, str], EvidenceSlot]:
    """Per (site, recipe): its newest valid and newest invalid evidence."""
    out: dict[tuple[str, str], EvidenceSlot] = {}
    for event in await recorded(bus, site, recipe):
        key = (event.site, event.recipe)
        out[key] = out.get(key, EvidenceSlot()).with_evidence(
            await verified(bus, event, trust, now))
    return out


async def latest_snapshot(bus: Bus, site: str) -> Snapshot | None:
    try:
        return await remote.latest(bus, site)
    except CairnError as exc:
        log.warning("latest snapshot of %s unreadable: %s", site, exc)
        return None


async def federation_sites(bus: Bus) -> list[str]:
    """The federation's sites, from its seed and later additions in FEDERATION."""
    sites: set[str] = set()
    async for item in replay(bus, subjects.FEDERATION_STREAM.name, FEDERATION_DECODER,
                             filters=[subjects.fed("seeded"), subjects.fed("site-added")]):
        if isinstance(item.event, FederationSeeded):
            sites |= {s.name for s in item.event.sites}
        elif isinstance(item.event, FederationSiteAdded):
            sites.add(item.event.site.name)
    return sorted(sites)


async def eligibility(bus: Bus, trust: TrustList, *, now: datetime,
                      max_age: timedelta | None, site: str | None = None,
                      recipe: str | None = None,
                      accepted_signers: Sequence[str] = ()) -> list[Eligibility]:
    """The verdict for every site and recipe with evidence (filtered), sorted; with a
    `recipe`, every site of the federation too (those without evidence: `no-evidence`)."""
    found = await slots(bus, trust, now=now, site=site, recipe=recipe)
    keys = set(found)
    if recipe is not None:
        keys |= {(s, recipe) for s in await federation_sites(bus) if site in (None, s)}
    snapshots = {s: await latest_snapshot(bus, s) for s in sorted({k[0] for k in keys})}
    return [judge(s, r, found.get((s, r)), snapshots[s], now=now, max_age=max_age,
                  accepted_signers=accepted_signers) for s, r in sorted(keys)]
