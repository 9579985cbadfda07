"""The federation's facts as the API shows them: each site's backend, latest snapshot, drift
and validations (FEDERATION), and the evidence recorded (EVIDENCE), folded and followed like
the study feeds (`cairn.httpapi.feeds`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cairn import subjects
from cairn.bus import Bus, Replayed, replay
from cairn.events import (
    EVIDENCE_DECODER,
    FEDERATION_DECODER,
    BackendDeclared,
    EvidenceRecorded,
    SnapshotDrift,
    SnapshotRecorded,
    ValidationCompleted,
)
from cairn.httpapi.models import Drift, EvidenceItem, SiteSummary

log = logging.getLogger("cairn.httpapi")
RESYNC_S = 2.0
SITE_EVENTS = ("snapshot", "drift", "backend", "config-loaded", "config-rejected")


@dataclass
class SiteFacts:
    name: str
    backend: str = ""
    capabilities: list[str] = field(default_factory=list)
    snapshot: SnapshotRecorded | None = None
    drift: SnapshotDrift | None = None
    validations: dict[str, str] = field(default_factory=dict)

    def summary(self) -> SiteSummary:
        snap = self.snapshot
        drift = None
        if self.drift is not None:
            drift = Drift(at=self.drift.at, previous=self.drift.previous,
                          current=self.drift.current,
                          changes=[msgspec.to_builtins(c) for c in self.drift.changes])
        return SiteSummary(name=self.name, backend=self.backend,
                           capabilities=list(self.capabilities),
                           snapshot_digest=snap.digest if snap else "",
                           snapshot_at=(snap.taken_at or snap.at) if snap else None,
                           nodes=snap.nodes if snap else 0, drift=drift,
                           validations=dict(self.validations))


class FederationFacts:
    """Sites and evidence, kept current from FEDERATION and EVIDENCE."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self.sites: dict[str, SiteFacts] = {}
        self.evidence: list[EvidenceItem] = []
        self._seq = {subjects.FEDERATION_STREAM.name: 0, subjects.EVIDENCE_STREAM.name: 0}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._subs: list[object] = []
        self.generation = 0
        """Grows whenever evidence is folded: the recipes' statuses are computed again."""

    async def start(self) -> None:
        # Wake-ups only (the facts are read from the streams): on exactly the site events the
        # facts are made of, which the hub may subscribe to (`cairn.site.*.*` it may not).
        site_events = [f"{subjects.ROOT}.site.*.{kind}" for kind in SITE_EVENTS]
        for pattern in (*site_events, f"{subjects.ROOT}.validation.>",
                        f"{subjects.ROOT}.evidence.>"):
            self._subs.append(await self._bus.subscribe_core(pattern, self._on_live))
        await self.sync()
        self._task = asyncio.create_task(self._run(), name="federation-facts")

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()  # type: ignore[attr-defined]
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _on_live(self, _msg: object) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RESYNC_S)
            self._wake.clear()  # before syncing: a wake-up during the sync is not lost
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("federation facts: %s", exc)

    async def sync(self) -> None:
        fed = subjects.FEDERATION_STREAM.name
        async for item in replay(self._bus, fed, FEDERATION_DECODER,
                                 start_seq=self._seq[fed] + 1):
            self._seq[fed] = item.seq
            self._apply(item)
        ev = subjects.EVIDENCE_STREAM.name
        async for record in replay(self._bus, ev, EVIDENCE_DECODER,
                                   start_seq=self._seq[ev] + 1):
            self._seq[ev] = record.seq
            if isinstance(record.event, EvidenceRecorded):
                e = record.event
                self.evidence.append(EvidenceItem(site=e.site, recipe=e.recipe, bundle=e.bundle,
                                                  result=e.result, validated_at=e.validated_at,
                                                  seq=record.seq))
                self.generation += 1

    def _site(self, name: str) -> SiteFacts:
        return self.sites.setdefault(name, SiteFacts(name=name))

    def _apply(self, item: Replayed[Any]) -> None:
        match item.event:
            case BackendDeclared() as e:
                facts = self._site(e.site)
                facts.backend, facts.capabilities = e.backend, list(e.capabilities)
            case SnapshotRecorded() as e:
                self._site(e.site).snapshot = e
            case SnapshotDrift() as e:
                self._site(e.site).drift = e
            case ValidationCompleted() as e:
                self._site(e.site).validations[e.recipe] = e.status
