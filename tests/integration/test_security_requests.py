"""Signed requests: the coordinator acts only on what a provisioned admin signed, once, in
time, for a study that admin belongs to; the actor it records is the signer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from cairn import api, subjects
from cairn.client import Client
from cairn.errors import InvalidInput, PermissionDenied, Timeout
from cairn.events import JobSubmitted
from cairn.runtime.context import Context
from cairn.runtime.embedded import EmbeddedFederation
from cairn.trust.requests import RequestSigner
from tests.fixtures.federation import make_federation, running
from tests.integration.cp_helpers import study_events, write_job

FEDERATION = {
    "federation": "local", "hub": "hub",
    "sites": [{"name": "hub", "org": "coord"}, {"name": "site-a", "org": "org-a"},
              {"name": "site-b", "org": "org-b"}],
    "admins": [{"name": "admin@coord", "org": "coord", "role": "project_admin"},
               {"name": "alice@org-a", "org": "org-a", "role": "lead"},
               {"name": "bob@org-b", "org": "org-b", "role": "lead"}],
    "studies": {"demo": {"sites": ["hub", "site-a", "site-b"],
                         "admins": ["admin@coord", "alice@org-a", "bob@org-b"]},
                "study-a": {"sites": ["site-a"], "admins": ["alice@org-a"]},
                "study-b": {"sites": ["site-b"], "admins": ["bob@org-b"]}},
}


@pytest.fixture
async def fed(tmp_path: Path) -> AsyncIterator[EmbeddedFederation]:
    federation = make_federation(tmp_path)
    federation.secure = True
    federation.dir.mkdir(parents=True)
    federation.federation_file.write_text(yaml.safe_dump(FEDERATION))
    async with running(federation):
        yield federation


async def _as(fed: EmbeddedFederation, who: str, study: str, actor: str | None = None
              ) -> Client:
    assert fed.nats is not None
    return await Client.connect(Context(nats_url=fed.nats.url, study=study,
                                        actor=actor or who, **fed.client_options(who)),
                                request_timeout=3.0)


def _signed(fed: EmbeddedFederation, who: str, request: api.Request, study: str, *,
            now: float | None = None) -> bytes:
    assert fed.trust is not None
    signer = RequestSigner.from_creds(fed.trust.creds(who))
    return signer.sign(api.Envelope(request=request, actor=who, study=study), now=now)


async def _send(fed: EmbeddedFederation, payload: bytes, subject: str) -> api.Result:
    bus = await fed.bus()  # delivered by the hub, so only the coordinator's check decides
    try:
        data = await bus.request(subject, payload, timeout=5.0)
    finally:
        await bus.close()
    return api.decode_reply(data, subject=subject)


async def test_an_admin_of_one_study_is_refused_in_another(fed: EmbeddedFederation) -> None:
    alice = await _as(fed, "alice@org-a", "study-b")
    try:
        with pytest.raises(Timeout):  # the broker drops it: alice may not publish there
            await alice.jobs()
        # Federation-wide reads are scoped too: she lists only the studies she is in.
        assert sorted(s.name for s in await alice.study_list()) == ["demo", "study-a"]
    finally:
        await alice.close()
    subject = subjects.api_study("study-b", "jobs")
    with pytest.raises(PermissionDenied, match="not an admin of study study-b"):
        await _send(fed, _signed(fed, "alice@org-a", api.JobList(), "study-b"), subject)
    # And in her own study she is answered.
    assert await _send(fed, _signed(fed, "alice@org-a", api.JobList(), "study-a"),
                       subjects.api_study("study-a", "jobs"))


async def test_tampered_replayed_expired_and_unsigned_requests_each_say_why(
        fed: EmbeddedFederation) -> None:
    subject = subjects.api_study("study-a", "jobs")
    good = _signed(fed, "alice@org-a", api.JobList(), "study-a")
    tampered = good.replace(b'"state":null', b'"state":"running"', 1)
    assert tampered != good
    with pytest.raises(PermissionDenied, match="tampered request"):
        await _send(fed, tampered, subject)
    assert await _send(fed, good, subject)
    with pytest.raises(PermissionDenied, match="replayed request"):
        await _send(fed, good, subject)
    old = _signed(fed, "alice@org-a", api.JobList(), "study-a", now=time.time() - 120)
    with pytest.raises(PermissionDenied, match="expired request"):
        await _send(fed, old, subject)
    unsigned = api.Envelope(request=api.JobList(), actor="alice@org-a", study="study-a")
    with pytest.raises(PermissionDenied, match="unsigned request"):
        await _send(fed, api.encode_envelope(unsigned), subject)
    bad = _signed(fed, "alice@org-a", api.JobList(), "s1.>")
    with pytest.raises(InvalidInput, match="s1"):
        await _send(fed, bad, subject)


async def test_the_actor_is_the_signer_and_a_lead_cannot_cancel_another_orgs_job(
        fed: EmbeddedFederation, tmp_path: Path) -> None:
    # Alice claims to be the project admin; the coordinator records who signed.
    alice = await _as(fed, "alice@org-a", "demo", actor="admin@coord")
    bob = await _as(fed, "bob@org-b", "demo")
    try:
        job = await alice.submit(write_job(tmp_path / "job"))
        submitted = [e for e in await study_events(fed, job=job) if isinstance(e, JobSubmitted)]
        assert [e.actor for e in submitted] == ["alice@org-a"]
        with pytest.raises(PermissionDenied):
            await bob.cancel(job)
        await alice.wait(job, timeout=60)
    finally:
        await alice.close()
        await bob.close()
