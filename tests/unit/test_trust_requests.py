"""Request signing and verification, without a bus."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest

from cairn import api
from cairn.errors import InvalidName, PermissionDenied
from cairn.spec.federation import parse_federation
from cairn.trust.provision import provision
from cairn.trust.requests import RAW_REQUEST, RequestSigner, RequestVerifier

FED = """\
federation: fed
hub: hub
sites: [{name: hub, org: coord}, {name: site-a, org: org-a}]
admins: [{name: alice@org-a, org: org-a, role: lead}]
studies: {s1: {sites: [hub, site-a], admins: [alice@org-a]}}
"""


@pytest.fixture
def keys(tmp_path: Path) -> tuple[RequestSigner, RequestVerifier, Path]:
    provision(parse_federation(FED), tmp_path, url="tls://x:1", hosts=["127.0.0.1"], port=1)
    signer = RequestSigner.from_creds(tmp_path / "kits" / "alice@org-a" / "admin.creds")
    return signer, RequestVerifier.from_kit(tmp_path / "kits" / "hub" / "hub.creds"), tmp_path


def _env(study: str = "s1", actor: str = "root@coord") -> api.Envelope:
    return api.Envelope(request=api.JobList(), actor=actor, study=study)


def test_the_signer_becomes_the_actor(keys: tuple[RequestSigner, RequestVerifier, Path]) -> None:
    signer, verifier, _ = keys
    verified = verifier.verify_envelope(signer.sign_envelope(_env()), study="s1")
    assert verified.actor == "alice@org-a"


def test_each_failure_has_its_own_reason(keys: tuple[RequestSigner, RequestVerifier, Path]
                                         ) -> None:
    signer, verifier, tmp = keys
    good = signer.sign_envelope(_env())
    with pytest.raises(PermissionDenied, match="tampered"):
        verifier.verify_envelope(msgspec.structs.replace(good, request=api.JobList(
            state="running")), study="s1")
    verifier.verify_envelope(good, study="s1")
    with pytest.raises(PermissionDenied, match="replayed"):
        verifier.verify_envelope(good, study="s1")
    with pytest.raises(PermissionDenied, match="expired"):
        verifier.verify_envelope(signer.sign_envelope(_env(), now=time.time() - 61), study="s1")
    with pytest.raises(PermissionDenied, match="at most"):
        verifier.verify_envelope(signer.sign_envelope(_env(), lifetime_s=3600), study="s1")
    with pytest.raises(PermissionDenied, match="unsigned"):
        verifier.verify_envelope(_env(), study="s1")
    with pytest.raises(InvalidName):
        verifier.verify_envelope(signer.sign_envelope(_env(study="s1.>")), study="s1")
    other = tmp / "other"
    provision(parse_federation(FED), other, url="tls://x:1", hosts=["127.0.0.1"], port=1)
    stranger = RequestSigner.from_creds(other / "kits" / "alice@org-a" / "admin.creds")
    with pytest.raises(PermissionDenied, match="credential is not valid"):
        verifier.verify_envelope(stranger.sign_envelope(_env()), study="s1")


def test_a_field_unknown_to_the_verifier_does_not_break_the_signature(
        keys: tuple[RequestSigner, RequestVerifier, Path]) -> None:
    """A newer client may send fields this coordinator does not know: it checks the bytes
    that arrived, not its own re-encoding of what it decoded."""
    signer, verifier, _ = keys
    signed = signer.sign_envelope(_env())
    raw = api.encode_envelope(signed)
    # What a newer sender's signature covers: its envelope with an extra field.
    newer = raw.replace(b'"actor":', b'"added_later":1,"actor":', 1)
    unsigned_newer = newer.replace(b'"signature":"' + signed.signature.encode() + b'"}',
                                   b'"signature":null}')
    import base64

    from cairn.trust.nkeyjwt import read_creds, sign

    _, seed = read_creds((keys[2] / "kits" / "alice@org-a" / "admin.creds").read_text())
    sig = base64.urlsafe_b64encode(sign(seed, unsigned_newer)).decode().rstrip("=")
    arrived = unsigned_newer.replace(b'"signature":null}', b'"signature":"' + sig.encode() +
                                     b'"}')
    decoded = api.decode_envelope(arrived, verb="jobs", study="s1")
    token = RAW_REQUEST.set(arrived)
    try:
        assert verifier.verify_envelope(decoded, study="s1").actor == "alice@org-a"
    finally:
        RAW_REQUEST.reset(token)
    with pytest.raises(PermissionDenied, match="tampered"):
        verifier.verify_envelope(decoded, study="s1")  # re-encoding alone cannot know


def test_verify_signer_says_who_signed_and_leaves_the_rest_to_the_caller(
        keys: tuple[RequestSigner, RequestVerifier, Path]) -> None:
    """A site's launcher decides who may read logs itself: a site's signed log read names the
    site, though a site may make no admin request of that kind."""
    _, verifier, tmp = keys
    site = RequestSigner.from_creds(tmp / "kits" / "site-a" / "site.creds")
    read = api.Envelope(request=api.LogRead(launch_id="j-1/site-a/client/0/0"), study="s1")
    signed = site.sign_envelope(read)
    assert verifier.verify_signer(signed).identity.site == "site-a"
    with pytest.raises(PermissionDenied, match="replayed"):
        verifier.verify_signer(signed)
    with pytest.raises(PermissionDenied, match="may make requests only in study"):
        verifier.verify_envelope(site.sign_envelope(read))
    with pytest.raises(PermissionDenied, match="unsigned"):
        verifier.verify_signer(read)
