"""Evidence-gated dispatch: which sites a job that `requires` a recipe may go to, why the
others are skipped, and the signed receipt of each gated dispatch.

`EvidenceBoard` follows the EVIDENCE stream (each bundle fetched and verified offline once)
and the sites' snapshots in FEDERATION, so a drift that breaks a constraint is seen as soon as
its snapshot is recorded. `EvidenceView` is a frozen copy of what it knows, handed to the pure
decisions in `decide.py` inside the `Context`; the functions below are what those decisions
call.

Options (`-O key=value`): `evidence_trust` (trust list; without one no evidence verifies, so
every gated job is unschedulable with reason `untrusted-signer` or `no-evidence`),
`evidence_key` (the key that signs receipts; without one dispatches carry no receipt).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from cairn import subjects
from cairn.bus import Bus, Delivery, replay
from cairn.errors import CairnError
from cairn.events import (
    EVIDENCE_DECODER,
    FEDERATION_DECODER,
    EvidenceRecorded,
    RecipeRequirement,
    RoleRequest,
    SnapshotRecorded,
)
from cairn.evidence.eligibility import Eligibility, EvidenceSlot, judge
from cairn.evidence.keys import SigningKey, load_signing_key
from cairn.evidence.receipts import role_gated
from cairn.evidence.status import verified
from cairn.evidence.trust import TrustList, load_trust
from cairn.evidence.vsa import build_receipt
from cairn.runtime.service import Runtime
from cairn.snapshot import Snapshot
from cairn.snapshot.remote import snapshot_of
from cairn.state.job import JobState

log = logging.getLogger("cairn.coordinator")
SNAPSHOTS = subjects.site_event_any("snapshot")


@dataclass(frozen=True)
class EvidenceView:
    """What the coordinator knows of evidence and snapshots at one moment (immutable)."""

    slots: Mapping[tuple[str, str], EvidenceSlot] = field(default_factory=dict)
    snapshots: Mapping[str, Snapshot] = field(default_factory=dict)
    key: SigningKey | None = None
    verifier: str = "coordinator"

    def judge(self, site: str, requires: RecipeRequirement, now: datetime) -> Eligibility:
        age = timedelta(seconds=requires.max_age_s) if requires.max_age_s else None
        return judge(site, requires.recipe, self.slots.get((site, requires.recipe)),
                     self.snapshots.get(site), now=now, max_age=age,
                     accepted_signers=requires.signers)


def gated(job: JobState, role: RoleRequest) -> bool:
    """Whether a role's sites must hold evidence (`cairn.evidence.receipts.role_gated`: the
    rule `cairn evidence receipts` reads dispatches with)."""
    return role_gated(job.spec.requires, role)


def refusal(job: JobState, site: str, view: EvidenceView | None, now: datetime) -> str | None:
    """Why `site` may not take the job (`reason: detail`), or None when it may."""
    requires = job.spec.requires
    if requires is None:
        return None
    if view is None:
        return "no-evidence: the coordinator follows no evidence"
    verdict = view.judge(site, requires, now)
    return None if verdict.eligible else f"{verdict.reason}: {verdict.message}"


def unreachable(job: JobState, candidates: Mapping[str, list[str]], needs: Mapping[str, int],
                view: EvidenceView | None, now: datetime) -> dict[str, str] | None:
    """The per-site reasons when evidence alone keeps some role below the sites it needs (the
    job is then unschedulable at once: waiting does not make evidence appear); else None."""
    reasons: dict[str, str] = {}
    for role in job.spec.roles:
        if not gated(job, role):
            continue
        sites = candidates.get(role.name, [])
        refused = {s: why for s in sites if (why := refusal(job, s, view, now)) is not None}
        reasons.update({s: f"{role.name}: {why}" for s, why in refused.items()})
        eligible = len(sites) - len(refused)
        need = needs.get(role.name, 1)
        if eligible < need:
            recipe = job.spec.requires.recipe if job.spec.requires else ""
            reasons["*"] = (f"{role.name}: {eligible} of {need} sites have valid evidence "
                            f"for {recipe}")
            return reasons
    return None


def receipt(job: JobState, site: str, view: EvidenceView | None,
            now: datetime) -> dict[str, Any] | None:
    """The signed VSA receipt for dispatching `job` to `site` (None when ungated or no key)."""
    requires = job.spec.requires
    if requires is None or view is None or view.key is None:
        return None
    verdict = view.judge(site, requires, now)
    if not verdict.eligible:
        return None
    return build_receipt(key=view.key, verifier=view.verifier, site=site, study=job.study,
                         job=job.job, recipe=requires.recipe, bundle=verdict.evidence,
                         attestation=verdict.attestation,
                         requirement=msgspec.to_builtins(requires), verified_at=now)


class EvidenceBoard:
    """Follows evidence and snapshots; `view()` is what decisions see."""

    def __init__(self, options: Mapping[str, str], verifier: str) -> None:
        trust_file = options.get("evidence_trust")
        key_file = options.get("evidence_key")
        self.trust = load_trust(Path(trust_file)) if trust_file else TrustList()
        self.key = load_signing_key(Path(key_file)) if key_file else None
        self.verifier = verifier
        self.slots: dict[tuple[str, str], EvidenceSlot] = {}
        self.snapshots: dict[str, Snapshot] = {}
        self.seen: set[str] = set()
        self._view = EvidenceView(key=self.key, verifier=verifier)
        self.bus: Bus | None = None

    def view(self) -> EvidenceView:
        return self._view

    def _refresh(self) -> None:
        self._view = EvidenceView(slots=dict(self.slots), snapshots=dict(self.snapshots),
                                  key=self.key, verifier=self.verifier)

    async def start(self, rt: Runtime) -> None:
        """Fold what is stored, then follow both streams."""
        self.bus = rt.bus
        await rt.bus.ensure(subjects.EVIDENCE_STREAM)
        async for item in replay(rt.bus, subjects.EVIDENCE_STREAM.name, EVIDENCE_DECODER):
            if item.event is not None:
                await self.add_evidence(item.event)
        async for fed_item in replay(rt.bus, subjects.FEDERATION_STREAM.name,
                                     FEDERATION_DECODER,
                                     filters=[SNAPSHOTS]):
            if isinstance(fed_item.event, SnapshotRecorded):
                await self.add_snapshot(fed_item.event)
        self._refresh()
        await rt.consume(stream=subjects.EVIDENCE_STREAM.name, durable="coordinator-evidence",
                         filters=[subjects.evidence_filter()], decoder=EVIDENCE_DECODER,
                         handler=self._on_evidence)
        await rt.consume(stream=subjects.FEDERATION_STREAM.name,
                         durable="coordinator-snapshots",
                         filters=[SNAPSHOTS],
                         decoder=FEDERATION_DECODER, handler=self._on_snapshot)

    async def add_evidence(self, event: EvidenceRecorded) -> None:
        if event.bundle in self.seen:
            return
        assert self.bus is not None
        found = await verified(self.bus, event, self.trust, datetime.now(UTC))
        self.seen.add(event.bundle)
        key = (event.site, event.recipe)
        self.slots[key] = self.slots.get(key, EvidenceSlot()).with_evidence(found)
        if not found.verification.valid:
            failed = found.verification.failed()
            log.warning("evidence %s for %s/%s does not verify: %s", event.bundle[:12],
                        event.site, event.recipe,
                        ", ".join(f"{c.name}: {c.reason}" for c in failed))

    async def add_snapshot(self, event: SnapshotRecorded) -> None:
        known = self.snapshots.get(event.site)
        if known is not None and event.taken_at is not None and event.taken_at <= known.taken_at:
            return
        assert self.bus is not None
        try:
            self.snapshots[event.site] = await snapshot_of(self.bus, event)
        except CairnError as exc:
            log.warning("snapshot %s of %s unreadable: %s", event.digest[:12], event.site, exc)

    async def catch_up(self, sites: Iterable[str], recipe: str) -> None:
        """Read the last stored snapshot of each site and its last evidence for `recipe`
        directly, so a dispatch never acts on a view a consumer has not caught up with yet
        (a drift recorded a moment ago demotes before the next dispatch)."""
        assert self.bus is not None
        changed = False
        for site in sites:
            try:
                found = await self.bus.last_message(subjects.FEDERATION_STREAM.name,
                                                    subjects.site_event(site, "snapshot"))
                if found is not None:
                    event = FEDERATION_DECODER.decode(found[2])
                    if isinstance(event, SnapshotRecorded):
                        await self.add_snapshot(event)
                        changed = True
                found = await self.bus.last_message(subjects.EVIDENCE_STREAM.name,
                                                    subjects.evidence(site, recipe))
                if found is not None:
                    await self.add_evidence(EVIDENCE_DECODER.decode(found[2]))
                    changed = True
            except (CairnError, msgspec.DecodeError, msgspec.ValidationError) as exc:
                log.warning("catching up on evidence of %s: %s", site, exc)
        if changed:
            self._refresh()

    async def _on_evidence(self, event: Any, _d: Delivery) -> None:
        if isinstance(event, EvidenceRecorded):
            await self.add_evidence(event)
            self._refresh()

    async def _on_snapshot(self, event: Any, _d: Delivery) -> None:
        if isinstance(event, SnapshotRecorded):
            await self.add_snapshot(event)
            self._refresh()
