"""The signer's keys: its own (named, or made under the state dir) and a co-signer's, both on
every envelope; the outcome it signs is read from a run's events."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from cairn.errors import Unavailable
from cairn.events import ValidationCompleted, ValidationPhase, ValidationStarted, stamp
from cairn.evidence.bundle import build_bundle
from cairn.evidence.keys import create_key_files
from cairn.evidence.verify import verify_bundle
from cairn.runtime.service import ServiceConfig
from cairn.signer.runs import outcome_of
from cairn.signer.service import signing_keys
from tests.fixtures import evidence as ev


def test_site_key_and_federation_cosigner_both_sign(tmp_path: Path) -> None:
    site = create_key_files(tmp_path / "site-a")
    federation = create_key_files(tmp_path / "federation")
    keys = signing_keys(ServiceConfig(options={
        "evidence_key": str(tmp_path / "site-a.key"),
        "evidence_cosign_key": str(tmp_path / "federation.key")}))
    assert [k.key_id for k in keys] == [site.key_id, federation.key_id]
    files = build_bundle(ev.judge("site-a", ev.snapshot("site-a")), keys)
    trust = ev.trust_of(("site-a", "site", site), ("federation", "first-party", federation))
    result = verify_bundle(files, trust, now=datetime.now(UTC))
    assert [s.name for s in result.signers] == ["site-a", "federation"]


def test_a_key_is_made_under_the_state_dir_once(tmp_path: Path) -> None:
    first = signing_keys(ServiceConfig(state_dir=str(tmp_path)))
    again = signing_keys(ServiceConfig(state_dir=str(tmp_path)))
    assert first[0].key_id == again[0].key_id
    assert (tmp_path / "keys" / "signer.key").stat().st_mode & 0o077 == 0
    with pytest.raises(Unavailable, match="evidence_key"):
        signing_keys(ServiceConfig())


def test_the_outcome_comes_from_the_runs_events() -> None:
    judged = ev.judge("site-a", ev.snapshot("site-a"), run="v-1")
    base = {**stamp(), "source": "validator@hub", "run": "v-1", "site": "site-a",
            "recipe": ev.CPU_RECIPE}
    events = [ValidationStarted(**base, resolved=dict(judged.resolved)),
              *[ValidationPhase(**base, phase=p, status=judged.phases[p], ctrf=dict(doc))
                for p, doc in judged.ctrf.items()],
              ValidationCompleted(**base, status="passed")]
    outcome = outcome_of(events, judged.snapshot)
    assert outcome is not None and outcome.passed and outcome.run == "v-1"
    assert outcome.ctrf == judged.ctrf and outcome.validated_at == events[-1].at
    assert outcome_of(events[1:], None) is None  # never started: nothing to attest
