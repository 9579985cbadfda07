"""Ed25519 keys and DSSE envelopes: files, key ids, PAE, co-signing, tampering, interop."""

from __future__ import annotations

import base64
import copy
import json
import stat
from pathlib import Path

import msgspec
import pytest
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from cairn.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from cairn.evidence import dsse
from cairn.evidence.keys import (
    SigningKey,
    create_key_files,
    load_public_key,
    load_signing_key,
    parse_public_key,
)


def test_key_files_have_owner_only_private_key_and_matching_ids(tmp_path: Path) -> None:
    key = create_key_files(tmp_path / "keys" / "site-a")
    private = tmp_path / "keys" / "site-a.key"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert load_signing_key(private).key_id == key.key_id
    public = load_public_key(tmp_path / "keys" / "site-a.pub")
    assert public.key_id == key.key_id
    assert len(key.key_id) == 64
    assert parse_public_key(public.public_raw_b64()).key_id == key.key_id


def test_key_id_differs_per_key() -> None:
    assert SigningKey.generate().key_id != SigningKey.generate().key_id


def test_existing_key_is_not_overwritten(tmp_path: Path) -> None:
    create_key_files(tmp_path / "k")
    with pytest.raises(Conflict):
        create_key_files(tmp_path / "k")
    assert create_key_files(tmp_path / "k", overwrite=True).key_id


def test_readable_private_key_is_refused(tmp_path: Path) -> None:
    create_key_files(tmp_path / "k")
    (tmp_path / "k.key").chmod(0o644)
    with pytest.raises(PermissionDenied, match="0644"):
        load_signing_key(tmp_path / "k.key")


def test_bad_key_files(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        load_signing_key(tmp_path / "missing.key")
    junk = tmp_path / "junk.key"
    junk.write_text("hello")
    junk.chmod(0o600)
    with pytest.raises(InvalidInput, match=r"junk\.key"):
        load_signing_key(junk)
    with pytest.raises(InvalidInput):
        parse_public_key(base64.b64encode(b"short").decode())


def test_pae_matches_the_specification_example() -> None:
    # The DSSE protocol document's worked example.
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world")


def test_several_signatures_verify_and_roundtrip() -> None:
    site, federation = SigningKey.generate(), SigningKey.generate()
    envelope = dsse.sign(b'{"a":1}', dsse.IN_TOTO_PAYLOAD_TYPE, [site])
    envelope = dsse.add_signature(envelope, federation)
    decoded = dsse.decode_envelope(dsse.encode_envelope(envelope))
    keys = {k.key_id: k.verifying_key for k in (site, federation)}
    assert dsse.verified_key_ids(decoded, keys) == [site.key_id, federation.key_id]
    assert json.loads(dsse.encode_envelope(envelope))["payloadType"] == dsse.IN_TOTO_PAYLOAD_TYPE


def test_changed_payload_byte_or_signature_byte_or_type_fails() -> None:
    key = SigningKey.generate()
    keys = {key.key_id: key.verifying_key}
    envelope = dsse.sign(b"payload bytes", "text/plain", [key])
    tampered_payload = msgspec.structs.replace(
        envelope, payload=base64.b64encode(b"payload bytez").decode())
    raw_sig = bytearray(base64.b64decode(envelope.signatures[0].sig))
    raw_sig[0] ^= 1
    tampered_sig = msgspec.structs.replace(envelope, signatures=[
        dsse.Signature(keyid=key.key_id, sig=base64.b64encode(bytes(raw_sig)).decode())])
    retyped = msgspec.structs.replace(envelope, payload_type="text/other")
    for bad in (tampered_payload, tampered_sig, retyped):
        [check] = dsse.check_signatures(bad, keys)
        assert check.outcome is dsse.SignatureOutcome.BAD_SIGNATURE
    [unknown] = dsse.check_signatures(envelope, {})
    assert unknown.outcome is dsse.SignatureOutcome.UNKNOWN_KEY


def test_not_an_envelope_names_the_problem() -> None:
    with pytest.raises(InvalidInput, match="payloadType"):
        dsse.decode_envelope(b'{"payload": "aGk=", "signatures": []}', source="x.json")
    with pytest.raises(InvalidInput, match="not JSON"):
        dsse.decode_envelope(b"{", source="x.json")


def _sslib_key(key: SigningKey) -> SSlibKey:
    return SSlibKey.from_crypto(key.private_key.public_key(), keyid=key.key_id)


def test_securesystemslib_verifies_a_cairn_envelope_with_two_signers() -> None:
    site, federation = SigningKey.generate(), SigningKey.generate()
    envelope = dsse.add_signature(
        dsse.sign(b'{"_type":"x"}', dsse.IN_TOTO_PAYLOAD_TYPE, [site]), federation)
    as_dict = json.loads(dsse.encode_envelope(envelope))
    theirs = SslibEnvelope.from_dict(copy.deepcopy(as_dict))
    accepted = theirs.verify([_sslib_key(site), _sslib_key(federation)], 2)
    assert set(accepted) == {site.key_id, federation.key_id}

    as_dict["payload"] = base64.b64encode(b'{"_type":"y"}').decode()
    with pytest.raises(VerificationError):
        SslibEnvelope.from_dict(copy.deepcopy(as_dict)).verify([_sslib_key(site)], 1)
