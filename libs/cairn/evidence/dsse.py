"""DSSE envelopes (Dead Simple Signing Envelope v1), written from the DSSE specification.

An envelope carries a payload, its type, and any number of signatures; each signature is over
the Pre-Authentication Encoding (PAE) of type and payload, never over the bare payload, so a
signature cannot be replayed under another payload type:

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

with LEN the ASCII decimal byte length. Several parties may sign one envelope (a site, then the
federation co-signing): `add_signature` returns a new envelope with one more signature.

This module is a stable API shared by evidence and deployment-bundle signing.
"""

from __future__ import annotations

import base64
import binascii
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import msgspec

from cairn.errors import InvalidInput
from cairn.evidence.keys import SigningKey, VerifyingKey

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


class Signature(msgspec.Struct, frozen=True, kw_only=True):
    """One signature: the signer's key id and the base64 Ed25519 signature of the PAE."""

    keyid: str = ""
    sig: str


class Envelope(msgspec.Struct, frozen=True, kw_only=True, rename={"payload_type": "payloadType"}):
    """A DSSE envelope as it is serialised: base64 payload, its type, the signatures."""

    payload: str
    payload_type: str
    signatures: list[Signature] = []

    def payload_bytes(self) -> bytes:
        """The decoded payload (standard or URL-safe base64, as the spec allows)."""
        return _b64decode(self.payload, "payload")


def pae(payload_type: str, payload: bytes) -> bytes:
    """The Pre-Authentication Encoding of a payload type and payload."""
    type_bytes = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(type_bytes), type_bytes, len(payload), payload)


def sign(payload: bytes, payload_type: str, keys: Iterable[SigningKey]) -> Envelope:
    """An envelope around `payload` signed by each of `keys` in order."""
    message = pae(payload_type, payload)
    return Envelope(
        payload=base64.b64encode(payload).decode(),
        payload_type=payload_type,
        signatures=[_signature(key, message) for key in keys],
    )


def add_signature(envelope: Envelope, key: SigningKey) -> Envelope:
    """A copy of `envelope` with `key`'s signature appended (co-signing)."""
    message = pae(envelope.payload_type, envelope.payload_bytes())
    return msgspec.structs.replace(
        envelope, signatures=[*envelope.signatures, _signature(key, message)])


def _signature(key: SigningKey, message: bytes) -> Signature:
    return Signature(keyid=key.key_id, sig=base64.b64encode(key.sign(message)).decode())


class SignatureOutcome(enum.StrEnum):
    """What checking one signature found."""

    VALID = "valid"
    UNKNOWN_KEY = "unknown-key"  # no key with this id was offered
    BAD_SIGNATURE = "bad-signature"  # a key was found and the signature does not verify


@dataclass(frozen=True)
class SignatureCheck:
    """The outcome for one signature of an envelope."""

    keyid: str
    outcome: SignatureOutcome


def check_signatures(envelope: Envelope,
                     keys: Mapping[str, VerifyingKey]) -> list[SignatureCheck]:
    """Check every signature against the keys offered, by key id.

    A signature without a key id is tried against every key (the spec makes keyid optional).
    A payload that is not base64 makes every signature bad.
    """
    try:
        message = pae(envelope.payload_type, envelope.payload_bytes())
    except InvalidInput:
        return [SignatureCheck(s.keyid, SignatureOutcome.BAD_SIGNATURE)
                for s in envelope.signatures]
    return [_check_one(sig, keys, message) for sig in envelope.signatures]


def _check_one(sig: Signature, keys: Mapping[str, VerifyingKey],
               message: bytes) -> SignatureCheck:
    candidates = [keys[sig.keyid]] if sig.keyid in keys else (
        list(keys.values()) if not sig.keyid else [])
    if not candidates:
        return SignatureCheck(sig.keyid, SignatureOutcome.UNKNOWN_KEY)
    try:
        raw = _b64decode(sig.sig, "sig")
    except InvalidInput:
        return SignatureCheck(sig.keyid, SignatureOutcome.BAD_SIGNATURE)
    for key in candidates:
        if key.verify(raw, message):
            return SignatureCheck(key.key_id, SignatureOutcome.VALID)
    return SignatureCheck(sig.keyid, SignatureOutcome.BAD_SIGNATURE)


def verified_key_ids(envelope: Envelope, keys: Mapping[str, VerifyingKey]) -> list[str]:
    """The ids of the offered keys whose signature on `envelope` verifies."""
    return [c.keyid for c in check_signatures(envelope, keys)
            if c.outcome is SignatureOutcome.VALID]


def encode_envelope(envelope: Envelope) -> bytes:
    """The envelope as JSON bytes."""
    return msgspec.json.encode(envelope)


_DECODER = msgspec.json.Decoder(Envelope)


def decode_envelope(data: bytes, *, source: str = "<envelope>") -> Envelope:
    """Parse an envelope from JSON.

    Raises:
        InvalidInput: not JSON, or not the DSSE envelope shape (names the field).
    """
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"not a DSSE envelope: {exc}", file=source) from None
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"not JSON: {exc}", file=source) from None


def _b64decode(text: str, field: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    try:
        if "-" in text or "_" in text:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("not base64", field=field) from None
