"""The one signing path, through a real secure federation: what the Python client signs is
what the coordinator checks, whatever spelling its values had; and a nonce, once used, is
refused after the coordinator is killed and restarted, or when it cannot be checked."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from cairn import api, subjects
from cairn.client import Client, JobRequest
from cairn.errors import PermissionDenied, Unavailable
from cairn.events import JobSubmitted, Resources, RoleRequest
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from cairn.trust.nkeyjwt import read_creds_file, sign
from cairn.trust.requests import RequestSigner, legacy_signed_bytes
from tests.integration.cp_helpers import study_events


def _loose_request(name: str) -> JobRequest:
    """Values the schema accepts but a re-encoding spells differently: ints in float
    fields (one past 2**53), tuples for lists, a non-ASCII string, an int dict key."""
    role = RoleRequest(name="client", entrypoint="python main.py",
                       resources=Resources(millicpus=100, memory_bytes=64 << 20),
                       sites=("site-a",))  # type: ignore[arg-type]
    return JobRequest(name=name, roles=(role,),  # type: ignore[arg-type]
                      timeout_s=600, queue_timeout_s=10**17,  # type: ignore[arg-type]
                      params={"lr": 0.1, "note": "naïve ☃", 7: [1, 2.5]})  # type: ignore[dict-item]


def _signed_submit(fed: EmbeddedFederation, request: JobRequest) -> bytes:
    assert fed.trust is not None
    signer = RequestSigner.from_creds(fed.trust.creds(DEFAULT_ADMIN))
    return signer.sign(api.Envelope(request=api.Submit(spec=request), actor=DEFAULT_ADMIN,
                                    study="demo"))


def _legacy_signed_submit(fed: EmbeddedFederation, request: JobRequest) -> bytes:
    """A submit as clients before the splice sent it: signed over the envelope as the
    receiver re-encodes it (`600.0`), sent as the client encodes it (`600`)."""
    assert fed.trust is not None
    jwt, seed = read_creds_file(fed.trust.creds(DEFAULT_ADMIN))
    envelope = api.Envelope(request=api.Submit(spec=request), actor=DEFAULT_ADMIN,
                            study="demo", nonce=base64.urlsafe_b64encode(os.urandom(18)).decode(),
                            expires=datetime.now(UTC) + timedelta(seconds=60), key_id=jwt)
    signature = base64.urlsafe_b64encode(sign(seed, legacy_signed_bytes(envelope)))
    return api.encode_envelope(msgspec.structs.replace(
        envelope, signature=signature.decode().rstrip("=")))


async def _send(fed: EmbeddedFederation, payload: bytes) -> api.Result:
    subject = subjects.api_study("demo", "submit")
    bus = await fed.bus()
    try:
        data = await bus.request(subject, payload, timeout=10.0)
    finally:
        await bus.close()
    return api.decode_reply(data, subject=subject)


async def _submitted(fed: EmbeddedFederation, name: str) -> list[JobSubmitted]:
    return [e for e in await study_events(fed) if isinstance(e, JobSubmitted) and e.name == name]


async def test_loosely_typed_values_sign_and_verify_through_client_and_coordinator(
        federation: EmbeddedFederation, client: Client) -> None:
    job = await client.submit_request(_loose_request("loose"))
    [submitted] = await _submitted(federation, "loose")
    assert submitted.job == job
    assert submitted.actor == DEFAULT_ADMIN  # the verified signer
    assert submitted.timeout_s == 600.0
    assert submitted.queue_timeout_s == 1e17
    params: dict[str, Any] = submitted.params
    assert params == {"lr": 0.1, "note": "naïve ☃", "7": [1, 2.5]}
    # A client from before the splice is still understood.
    legacy = _legacy_signed_submit(federation, _loose_request("legacy"))
    assert b'"timeout_s":600,' in legacy
    assert isinstance(await _send(federation, legacy), api.Submitted)
    assert len(await _submitted(federation, "legacy")) == 1


async def test_a_request_replayed_after_kill_9_of_the_coordinator_is_refused(
        federation: EmbeddedFederation) -> None:
    captured = _signed_submit(federation, _loose_request("once"))
    assert isinstance(await _send(federation, captured), api.Submitted)
    federation.kill("coordinator")
    federation.respawn("coordinator")
    await federation.wait_healthy(60)
    with pytest.raises(PermissionDenied, match="replayed request"):
        await _send(federation, captured)
    assert len(await _submitted(federation, "once")) == 1


async def test_a_nonce_that_cannot_be_checked_refuses_the_request(
        federation: EmbeddedFederation) -> None:
    assert isinstance(await _send(federation, _signed_submit(federation, _loose_request("a"))),
                      api.Submitted)  # the bucket exists now
    bus = await federation.bus()
    try:
        await bus.js.delete_stream(f"KV_{subjects.KV_NONCES}")
    finally:
        await bus.close()
    with pytest.raises(Unavailable, match=f"KV {subjects.KV_NONCES}"):
        await _send(federation, _signed_submit(federation, _loose_request("unchecked")))
    assert await _submitted(federation, "unchecked") == []
    # The next request opens the bucket again (made afresh) and is answered.
    assert isinstance(await _send(federation, _signed_submit(federation, _loose_request("b"))),
                      api.Submitted)
