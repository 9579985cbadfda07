"""Request signing and verification, without a bus: what is signed is the bytes sent."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import msgspec
import pytest

from cairn import api
from cairn.errors import InvalidName, PermissionDenied
from cairn.events import Resources, RoleRequest
from cairn.spec.federation import parse_federation
from cairn.trust.nkeyjwt import read_creds, sign
from cairn.trust.provision import provision
from cairn.trust.requests import (
    MemoryNonces,
    RequestSigner,
    RequestVerifier,
    legacy_signed_bytes,
    signed_bytes,
)

FED = """\
federation: fed
hub: hub
sites: [{name: hub, org: coord}, {name: site-a, org: org-a}]
admins: [{name: alice@org-a, org: org-a, role: lead}]
studies: {s1: {sites: [hub, site-a], admins: [alice@org-a]}}
"""


class Keys:
    def __init__(self, root: Path) -> None:
        provision(parse_federation(FED), root, url="tls://x:1", hosts=["127.0.0.1"], port=1)
        self.root = root
        self.creds = root / "kits" / "alice@org-a" / "admin.creds"
        self.signer = RequestSigner.from_creds(self.creds)
        self.verifier = RequestVerifier.from_kit(root / "kits" / "hub" / "hub.creds",
                                                 MemoryNonces())

    async def verify(self, raw: bytes, verb: str = "jobs") -> api.Envelope:
        envelope = api.decode_envelope(raw, verb=verb, study="s1")
        return await self.verifier.verify(raw, envelope, study="s1")

    def sign_raw(self, unsigned: bytes) -> bytes:
        """`unsigned` (ending `"signature":null}`) signed and spliced by hand, as any other
        sender would."""
        _, seed = read_creds(self.creds.read_text())
        sig = base64.urlsafe_b64encode(sign(seed, unsigned)).rstrip(b"=")
        return unsigned[:-len(b"null}")] + b'"' + sig + b'"}'


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


def _env(study: str = "s1", actor: str = "root@coord",
         request: api.Request | None = None) -> api.Envelope:
    return api.Envelope(request=request or api.JobList(), actor=actor, study=study)


async def test_the_signer_becomes_the_actor(keys: Keys) -> None:
    assert (await keys.verify(keys.signer.sign(_env()))).actor == "alice@org-a"


async def test_each_failure_has_its_own_reason(keys: Keys, tmp_path: Path) -> None:
    good = keys.signer.sign(_env())
    tampered = good.replace(b'"state":null', b'"state":"running"', 1)
    assert tampered != good
    with pytest.raises(PermissionDenied, match="tampered"):
        await keys.verify(tampered)
    await keys.verify(good)
    with pytest.raises(PermissionDenied, match="replayed"):
        await keys.verify(good)
    with pytest.raises(PermissionDenied, match="expired"):
        await keys.verify(keys.signer.sign(_env(), now=time.time() - 61))
    with pytest.raises(PermissionDenied, match="at most"):
        await keys.verify(keys.signer.sign(_env(), lifetime_s=3600))
    with pytest.raises(PermissionDenied, match="unsigned"):
        await keys.verify(api.encode_envelope(_env()))
    with pytest.raises(InvalidName):
        raw = keys.signer.sign(_env(study="s1.>"))
        await keys.verifier.verify(raw, msgspec.json.decode(raw, type=api.Envelope),
                                   study="s1")
    other = tmp_path / "other"
    provision(parse_federation(FED), other, url="tls://x:1", hosts=["127.0.0.1"], port=1)
    stranger = RequestSigner.from_creds(other / "kits" / "alice@org-a" / "admin.creds")
    with pytest.raises(PermissionDenied, match="credential is not valid"):
        await keys.verify(stranger.sign(_env()))


async def test_a_nonce_that_is_no_safe_key_is_refused(keys: Keys) -> None:
    signed = keys.signer.sign(_env())
    nonce = msgspec.json.decode(signed, type=api.Envelope).nonce
    assert nonce is not None
    for bad in ("short", "has.dots.and.stars*>" * 2, "x" * 129):
        unsigned = signed_bytes(signed)
        assert unsigned is not None
        raw = keys.sign_raw(unsigned.replace(nonce.encode(), bad.encode()))
        with pytest.raises(PermissionDenied, match="nonce of 16 to 128 base64url"):
            await keys.verify(raw)


async def test_values_the_schema_accepts_loosely_verify_as_sent(keys: Keys) -> None:
    """An int where a float goes, a tuple for a list, a float past 2**53 written as an int:
    the receiver's re-encoding of each differs from what was sent, and it still verifies."""
    spec = api.JobRequest(
        name="loose", roles=(RoleRequest(name="c", entrypoint="python x",  # type: ignore[arg-type]
                                         resources=Resources(gpus=0), sites=("site-a",)),),
        timeout_s=600, queue_timeout_s=10**20,  # type: ignore[arg-type]
        params={"lr": 0.1, "note": "naïve ☃", 3: "int key"})  # type: ignore[dict-item]
    raw = keys.signer.sign(_env(request=api.Submit(spec=spec)))
    received = api.decode_envelope(raw, verb="submit", study="s1")
    assert api.encode_envelope(msgspec.structs.replace(received)) != raw  # 600 vs 600.0, ...
    verified = await keys.verify(raw, verb="submit")
    assert isinstance(verified.request, api.Submit)
    assert verified.request.spec.timeout_s == 600.0
    assert verified.request.spec.queue_timeout_s == 1e20


async def test_a_field_unknown_to_the_verifier_does_not_break_the_signature(keys: Keys) -> None:
    """A newer client may send fields this verifier does not know: the bytes that arrived
    are checked, not a re-encoding of what was decoded."""
    unsigned = signed_bytes(keys.signer.sign(_env()))
    assert unsigned is not None
    newer = keys.sign_raw(unsigned.replace(b'"actor":', b'"added_later":1,"actor":', 1))
    assert (await keys.verify(newer)).actor == "alice@org-a"


async def test_a_request_of_a_client_before_the_splice_still_verifies(keys: Keys) -> None:
    """Old clients signed the envelope as the receiver re-encodes it, and sent their own
    encoding: with an int in a float field the two differ."""
    spec = api.JobRequest(name="old", roles=[RoleRequest(name="c", entrypoint="python x")],
                          timeout_s=600)  # type: ignore[arg-type]
    fresh = msgspec.json.decode(keys.signer.sign(_env(request=api.Submit(spec=spec))),
                                type=api.Envelope)
    _, seed = read_creds(keys.creds.read_text())
    sig = base64.urlsafe_b64encode(sign(seed, legacy_signed_bytes(
        msgspec.structs.replace(fresh, request=api.Submit(spec=spec))))).decode().rstrip("=")
    old = api.encode_envelope(msgspec.structs.replace(fresh, request=api.Submit(spec=spec),
                                                      signature=sig))
    assert b'"timeout_s":600,' in old
    assert (await keys.verify(old, verb="submit")).actor == "alice@org-a"


async def test_the_splice_is_exactly_undone(keys: Keys) -> None:
    raw = keys.signer.sign(_env())
    unsigned = signed_bytes(raw)
    assert unsigned is not None and unsigned.endswith(b'"signature":null}')
    assert raw.startswith(unsigned[:-len(b'null}')])
    assert signed_bytes(raw + b" ") is None  # nothing may follow the signature
    assert signed_bytes(api.encode_envelope(_env())) is None


async def test_verify_signer_says_who_signed_and_leaves_the_rest_to_the_caller(
        keys: Keys) -> None:
    """A site's launcher decides who may read logs itself: a site's signed log read names the
    site, though a site may make no admin request of that kind."""
    site = RequestSigner.from_creds(keys.root / "kits" / "site-a" / "site.creds")
    read = api.Envelope(request=api.LogRead(launch_id="j-1/site-a/client/0/0"), study="s1")
    raw = site.sign(read)
    decoded = api.decode_envelope(raw, verb="logs")
    assert (await keys.verifier.verify_signer(raw, decoded)).identity.site == "site-a"
    with pytest.raises(PermissionDenied, match="replayed"):
        await keys.verifier.verify_signer(raw, decoded)
    again = site.sign(read)
    with pytest.raises(PermissionDenied, match="may make requests only in study"):
        keys.verifier.check(again, api.decode_envelope(again, verb="logs"))
    unsigned = api.encode_envelope(read)
    with pytest.raises(PermissionDenied, match="unsigned"):
        await keys.verifier.verify_signer(unsigned, api.decode_envelope(unsigned, verb="logs"))
