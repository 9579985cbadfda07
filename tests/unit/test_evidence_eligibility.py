"""Eligibility from verified evidence: fresh, trusted, passed and not drifted, or a reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cairn.errors import InvalidInput
from cairn.evidence import store
from cairn.evidence.eligibility import EvidenceSlot, VerifiedEvidence, judge
from cairn.evidence.keys import SigningKey
from cairn.evidence.verify import verify_bundle
from cairn.evidence.vsa import VSA_PREDICATE, build_receipt, verify_receipt
from tests.fixtures import evidence as ev
from tests.fixtures.evidence import fresh_now  # noqa: F401 - autouse: NOW per test

KEY = SigningKey.generate()
TRUST = ev.trust_of(("site-a", "site", KEY))
NOW = datetime.now(UTC)


WEEK = timedelta(days=7)


def verified(files: dict[str, bytes]) -> VerifiedEvidence:
    _, event = store.describe(files, source="test")
    return VerifiedEvidence(event=event, verification=verify_bundle(files, TRUST, now=NOW))


def slot_for(**kwargs: object) -> EvidenceSlot:
    return EvidenceSlot().with_evidence(verified(ev.bundle("site-a", [KEY], **kwargs)))


def test_fresh_passing_evidence_makes_the_site_eligible_until_it_expires() -> None:
    at = NOW - timedelta(days=1)
    verdict = judge("site-a", ev.CPU_RECIPE, slot_for(validated_at=at), None, now=NOW,
                    max_age=WEEK)
    assert verdict.eligible and verdict.signers == ("site-a",)
    assert verdict.since == at and verdict.until == at + WEEK
    later = judge("site-a", ev.CPU_RECIPE, slot_for(validated_at=at), None,
                  now=NOW + WEEK, max_age=WEEK)
    assert later.reason == "expired"


def test_no_evidence_failed_validation_and_unaccepted_signer() -> None:
    assert judge("site-a", "r", None, None, now=NOW).reason == "no-evidence"
    failed = slot_for(snap=ev.snapshot("site-a", kernel="4.19.0"))
    assert judge("site-a", ev.CPU_RECIPE, failed, None, now=NOW).reason == "failed-validation"
    verdict = judge("site-a", ev.CPU_RECIPE, slot_for(), None, now=NOW,
                    accepted_signers=["first-party"])
    assert verdict.reason == "untrusted-signer"


def test_an_untrusted_bundle_never_displaces_valid_evidence() -> None:
    good = slot_for()
    stranger = verified(ev.bundle("site-a", [SigningKey.generate()]))
    assert judge("site-a", ev.CPU_RECIPE, good.with_evidence(stranger), None,
                 now=NOW).eligible
    alone = EvidenceSlot().with_evidence(stranger)
    assert judge("site-a", ev.CPU_RECIPE, alone, None, now=NOW).reason == "untrusted-signer"


def test_drift_that_breaks_a_constraint_demotes_naming_it_and_new_evidence_restores() -> None:
    judged = ev.snapshot("site-a", taken_at=NOW - timedelta(hours=2))
    slot = slot_for(snap=judged, validated_at=NOW - timedelta(hours=2))
    assert judge("site-a", ev.CPU_RECIPE, slot, judged, now=NOW).eligible
    drifted = ev.snapshot("site-a", kernel="4.19.0", taken_at=NOW - timedelta(minutes=5))
    verdict = judge("site-a", ev.CPU_RECIPE, slot, drifted, now=NOW)
    assert verdict.reason == "drifted"
    assert verdict.constraint == "OS.sysctl./proc/sys/kernel/osrelease"
    assert "OS.sysctl./proc/sys/kernel/osrelease" in verdict.message
    harmless = ev.snapshot("site-a", cores=64, taken_at=NOW - timedelta(minutes=5))
    assert judge("site-a", ev.CPU_RECIPE, slot, harmless, now=NOW).eligible
    revalidated = slot.with_evidence(verified(ev.bundle("site-a", [KEY], snap=harmless)))
    assert judge("site-a", ev.CPU_RECIPE, revalidated, harmless, now=NOW).eligible


def test_receipt_verifies_and_names_the_evidence() -> None:
    files = ev.bundle("site-a", [KEY])
    _, event = store.describe(files, source="test")
    coordinator = SigningKey.generate()
    receipt = build_receipt(key=coordinator, verifier="coordinator@hub", site="site-a",
                            study="s1", job="j-1", recipe=ev.CPU_RECIPE, bundle=event.bundle,
                            attestation=event.attestation_digest,
                            requirement={"recipe": ev.CPU_RECIPE}, verified_at=NOW)
    statement = verify_receipt(receipt, {coordinator.key_id: coordinator.verifying_key})
    assert statement.predicate_type == VSA_PREDICATE
    assert statement.subject[0].digest["sha256"] == event.bundle
    assert statement.predicate.input_attestations[0].digest["sha256"] == (
        event.attestation_digest)
    assert statement.predicate.resource_uri == "cairn:site/site-a"
    with pytest.raises(InvalidInput, match="does not verify"):
        verify_receipt(receipt, {KEY.key_id: KEY.verifying_key})
