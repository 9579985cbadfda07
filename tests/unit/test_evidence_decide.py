"""The coordinator's gated decisions, pure: only eligible sites get the job (with a receipt),
the others are skipped with typed reasons, and a job evidence keeps below min_sites is
unschedulable at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cairn.coordinator.decide import Context, SiteStatus, decide_job
from cairn.coordinator.eligibility import EvidenceView
from cairn.events import (
    DeployCommand,
    JobDispatched,
    JobSubmitted,
    JobUnschedulable,
    RecipeRequirement,
    Resources,
    RoleRequest,
    StudyCreated,
    stamp,
)
from cairn.evidence import store
from cairn.evidence.eligibility import EvidenceSlot, VerifiedEvidence
from cairn.evidence.keys import SigningKey
from cairn.evidence.verify import verify_bundle
from cairn.evidence.vsa import verify_receipt
from cairn.state import job as job_state
from cairn.state import study as study_state
from tests.fixtures import evidence as ev
from tests.fixtures.evidence import fresh_now  # noqa: F401 - autouse: NOW per test

SITE_KEY, COORDINATOR = SigningKey.generate(), SigningKey.generate()
TRUST = ev.trust_of(("site-a", "site", SITE_KEY))
NOW = datetime.now(UTC)


SITES = ("hub", "site-a", "site-b")


def slot(site: str, **kwargs: object) -> tuple[EvidenceSlot, str]:
    files = ev.bundle(site, [SITE_KEY], **kwargs)
    _, event = store.describe(files, source="test")
    found = VerifiedEvidence(event=event, verification=verify_bundle(files, TRUST, now=NOW))
    return EvidenceSlot().with_evidence(found), event.bundle


def context(view: EvidenceView) -> Context:
    free = Resources(gpus=0, millicpus=8000, memory_bytes=8 * 2**30)
    return Context(now=NOW, hub="hub", evidence=view, sites={
        s: SiteStatus(name=s, online=True, free=free, last_seen=NOW) for s in SITES})


def decide(view: EvidenceView, *, max_age_s: int | None = None, min_sites: int = 1) -> list:
    study = study_state.apply(None, StudyCreated(**stamp(), source="test", study="s1",
                                                 name="s1", sites=list(SITES)))
    submitted = JobSubmitted(
        **stamp(), source="test", study="s1", job="j-1", name="gated",
        roles=[RoleRequest(name="client", entrypoint="python main.py", min_sites=min_sites)],
        requires=RecipeRequirement(recipe=ev.CPU_RECIPE, max_age_s=max_age_s))
    job = job_state.apply(None, submitted)
    assert job is not None and study is not None
    return decide_job(job, study, context(view))


def test_only_the_site_with_valid_evidence_gets_the_job_with_a_receipt() -> None:
    site_a, bundle = slot("site-a", validated_at=NOW - timedelta(hours=1))
    view = EvidenceView(slots={("site-a", ev.CPU_RECIPE): site_a}, key=COORDINATOR,
                        verifier="coordinator@hub")
    out = decide(view)
    [dispatched] = [e for e in out if isinstance(e, JobDispatched)]
    assert [d.site for d in dispatched.deployments] == ["site-a"]
    [deploy] = [e for e in out if isinstance(e, DeployCommand)]
    assert deploy.receipt is not None
    statement = verify_receipt(deploy.receipt,
                               {COORDINATOR.key_id: COORDINATOR.verifying_key})
    assert statement.subject[0].digest["sha256"] == bundle


def test_evidence_below_min_sites_is_unschedulable_with_each_reason() -> None:
    site_a, _ = slot("site-a", validated_at=NOW - timedelta(days=2))
    view = EvidenceView(slots={("site-a", ev.CPU_RECIPE): site_a})
    [end] = decide(view, max_age_s=86400)
    assert isinstance(end, JobUnschedulable)
    assert end.reasons["site-a"].startswith("client: expired:")
    assert end.reasons["site-b"].startswith("client: no-evidence:")
    assert "0 of 1 sites" in end.reasons["*"]
    [end] = decide(EvidenceView(slots={("site-a", ev.CPU_RECIPE): slot("site-a")[0]}),
                   min_sites=2)
    assert isinstance(end, JobUnschedulable) and "1 of 2 sites" in end.reasons["*"]


def test_drift_in_the_latest_snapshot_demotes() -> None:
    judged = ev.snapshot("site-a", taken_at=NOW - timedelta(hours=1))
    site_a, _ = slot("site-a", snap=judged)
    drifted = ev.snapshot("site-a", kernel="4.19.0", taken_at=NOW - timedelta(minutes=1))
    view = EvidenceView(slots={("site-a", ev.CPU_RECIPE): site_a},
                        snapshots={"site-a": drifted})
    [end] = decide(view)
    assert isinstance(end, JobUnschedulable)
    assert end.reasons["site-a"].startswith("client: drifted:")
    assert "OS.sysctl./proc/sys/kernel/osrelease" in end.reasons["site-a"]
