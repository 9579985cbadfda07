"""Whether evidence makes a site eligible for a recipe right now: pure, given the verified
evidence, the site's latest snapshot and the time.

A site is eligible for recipe R while its newest valid evidence for R passed, is signed by a
trusted signer the job accepts, is younger than the max age, and the site's latest snapshot
still satisfies R's snapshot constraints. Otherwise the reason is one of `REASONS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from cairn.events import EvidenceRecorded
from cairn.evidence.rerun import broken_by
from cairn.evidence.verify import Verification
from cairn.recipes import Recipe
from cairn.snapshot import Snapshot

Reason = Literal["eligible", "no-evidence", "invalid-evidence", "untrusted-signer",
                 "failed-validation", "expired", "drifted"]
REASONS: tuple[Reason, ...] = ("eligible", "no-evidence", "invalid-evidence", "untrusted-signer",
                               "failed-validation", "expired", "drifted")


@dataclass(frozen=True)
class VerifiedEvidence:
    """One announced bundle, verified once (any age, any trusted signer)."""

    event: EvidenceRecorded
    verification: Verification

    @property
    def recipe(self) -> Recipe | None:
        return self.verification.recipe

    @property
    def snapshot(self) -> Snapshot | None:
        return self.verification.snapshot

    @property
    def validated_at(self) -> datetime:
        statement = self.verification.statement
        if statement is not None:
            return statement.predicate.cairn.validated_at
        return self.event.validated_at or self.event.at


@dataclass(frozen=True)
class EvidenceSlot:
    """What is known for one site and recipe: the newest valid bundle and the newest
    invalid one (which never displaces a valid bundle: a forged bundle cannot demote)."""

    valid: VerifiedEvidence | None = None
    invalid: VerifiedEvidence | None = None

    def with_evidence(self, evidence: VerifiedEvidence) -> EvidenceSlot:
        if evidence.verification.valid:
            if self.valid is None or evidence.validated_at >= self.valid.validated_at:
                return EvidenceSlot(valid=evidence, invalid=self.invalid)
            return self
        return EvidenceSlot(valid=self.valid, invalid=evidence)


@dataclass(frozen=True)
class Eligibility:
    """The verdict for one site and recipe."""

    site: str
    recipe: str
    reason: Reason
    message: str
    since: datetime | None = None
    until: datetime | None = None
    evidence: str = ""
    """The bundle digest the verdict rests on ("" when none)."""
    attestation: str = ""
    signers: tuple[str, ...] = ()
    constraint: str = ""
    """For `drifted`: the first constraint the latest snapshot breaks."""

    @property
    def eligible(self) -> bool:
        return self.reason == "eligible"

    def to_dict(self) -> dict[str, object]:
        return {"site": self.site, "recipe": self.recipe, "eligible": self.eligible,
                "reason": self.reason, "message": self.message,
                "since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None,
                "evidence": self.evidence, "signers": list(self.signers),
                "constraint": self.constraint or None}


def judge(site: str, recipe: str, slot: EvidenceSlot | None, latest: Snapshot | None, *,
          now: datetime, max_age: timedelta | None = None,
          accepted_signers: Sequence[str] = ()) -> Eligibility:
    """Eligibility of `site` for `recipe` at `now`."""
    if slot is None or (slot.valid is None and slot.invalid is None):
        return Eligibility(site, recipe, "no-evidence", f"no evidence for {recipe} from {site}")
    if slot.valid is None:
        assert slot.invalid is not None
        return _refused(site, recipe, slot.invalid)
    evidence = slot.valid
    digest, attestation = evidence.event.bundle, evidence.event.attestation_digest
    accepted = [s for s in evidence.verification.signers if s.matches(accepted_signers)]
    signers = tuple(s.name for s in accepted)
    if not accepted:
        return Eligibility(site, recipe, "untrusted-signer",
                           f"signed by {[s.name for s in evidence.verification.signers]}, none "
                           f"of them among the accepted signers {list(accepted_signers)}",
                           evidence=digest, attestation=attestation)
    at = evidence.validated_at
    until = at + max_age if max_age is not None else None
    if not evidence.verification.passed:
        why = evidence.verification.check("result").message
        return Eligibility(site, recipe, "failed-validation", why, since=at, signers=signers,
                           evidence=digest, attestation=attestation)
    if until is not None and now > until:
        return Eligibility(site, recipe, "expired",
                           f"evidence from {at.isoformat()} is older than the max age",
                           since=until, signers=signers, evidence=digest, attestation=attestation)
    if (latest is not None and evidence.recipe is not None
            and (evidence.snapshot is None or latest.digest != evidence.snapshot.digest)
            and (evidence.snapshot is None or latest.taken_at >= evidence.snapshot.taken_at)):
        broken = broken_by(evidence.recipe, latest)
        if broken:
            first = broken[0]
            return Eligibility(site, recipe, "drifted",
                               f"demoted by drift on constraint {first.name}: {first.message}",
                               since=latest.taken_at, signers=signers, constraint=first.name,
                               evidence=digest, attestation=attestation)
    return Eligibility(site, recipe, "eligible",
                       f"valid evidence signed by {', '.join(signers)}", since=at, until=until,
                       signers=signers, evidence=digest, attestation=attestation)


def _refused(site: str, recipe: str, evidence: VerifiedEvidence) -> Eligibility:
    failed = [c for c in evidence.verification.failed()
              if c.name != "result" and c.name != "freshness"]
    first = failed[0] if failed else evidence.verification.failed()[0]
    reason: Reason = ("untrusted-signer"
                      if first.reason in ("untrusted-key", "revoked-key", "signer-not-accepted")
                      else "invalid-evidence")
    return Eligibility(site, recipe, reason, f"{first.name}: {first.reason}: {first.message}",
                       evidence=evidence.event.bundle)
