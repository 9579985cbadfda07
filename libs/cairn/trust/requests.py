"""Signed requests: every `cairn.api` envelope is signed by its sender's credential key.

The canonical bytes are the msgspec JSON of the envelope with `signature` empty (`None`);
the signature is Ed25519 by the nkey of the sender's credential (base64url), `key_id`
carries the credential itself (so the coordinator checks it back to the root with nothing
stored), `nonce` makes each request single-use, and `expires` bounds how long it can be
replayed at all. The coordinator's verdict names the one thing that failed.
"""

from __future__ import annotations

import base64
import os
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from cairn import api
from cairn.errors import InvalidName, PermissionDenied
from cairn.names import check_name
from cairn.trust.credentials import Identity, Kind, Verified, verify_credential
from cairn.trust.nkeyjwt import CredentialError, decode_b64_any, read_creds, sign, verify

LIFETIME_S = 60.0
MAX_LIFETIME_S = 300.0
_ENCODER = msgspec.json.Encoder()

RAW_REQUEST: ContextVar[bytes | None] = ContextVar("cairn_raw_request", default=None)
"""The request's bytes as they arrived (set by the service runtime while it is handled)."""


_ENVELOPE = msgspec.json.Decoder(api.Envelope)


def canonical(envelope: api.Envelope) -> bytes:
    """What is signed: the envelope's JSON with `signature` empty, as the receiver decodes
    it (a round trip first, so a value the sender held as `600` where the field is a float
    is signed as the `600.0` the receiver re-encodes)."""
    unsigned = _ENCODER.encode(msgspec.structs.replace(envelope, signature=None))
    return _ENCODER.encode(_ENVELOPE.decode(unsigned))


def signed_bytes(envelope: api.Envelope) -> bytes:
    """The bytes the sender signed, taken from what arrived where possible.

    Re-encoding a decoded envelope gives the sender's bytes only while both run the same
    Struct versions: a field added later (with its default) would change them. So the bytes
    that arrived are used, with the signature (the envelope's last field) set back to null.
    """
    raw = RAW_REQUEST.get()
    tail = b'"signature":' + _ENCODER.encode(envelope.signature) + b"}"
    if raw is not None and raw.rstrip().endswith(tail):
        return raw.rstrip()[: -len(tail)] + b'"signature":null}'
    return canonical(envelope)


class RequestSigner:
    """Signs envelopes with one credential's key (an admin's, or a service's)."""

    def __init__(self, jwt: str, seed: str) -> None:
        self.jwt = jwt
        self._seed = seed

    @classmethod
    def from_creds(cls, path: str | Path) -> RequestSigner:
        jwt, seed = read_creds(Path(path).read_text(encoding="utf-8"))
        return cls(jwt, seed)

    def sign_envelope(self, envelope: api.Envelope, *, now: float | None = None,
                      lifetime_s: float = LIFETIME_S) -> api.Envelope:
        t = time.time() if now is None else now
        unsigned = msgspec.structs.replace(
            envelope, nonce=base64.urlsafe_b64encode(os.urandom(18)).decode(),
            expires=datetime.fromtimestamp(t + lifetime_s, UTC), key_id=self.jwt,
            signature=None)
        signature = sign(self._seed, canonical(unsigned))
        return msgspec.structs.replace(
            unsigned, signature=base64.urlsafe_b64encode(signature).decode().rstrip("="))


class RequestVerifier:
    """The coordinator's check of every request; remembers nonces until they expire."""

    def __init__(self, roots: frozenset[str]) -> None:
        self.roots = roots
        self._nonces: dict[str, float] = {}

    @classmethod
    def from_kit(cls, creds: str | Path) -> RequestVerifier:
        roots_file = Path(creds).parent / "roots.txt"
        return cls(frozenset(roots_file.read_text(encoding="utf-8").split()))

    def verify_envelope(self, envelope: api.Envelope, *, study: str | None = None,
                        now: float | None = None) -> api.Envelope:
        """The envelope with `actor` set to the verified identity.

        Raises:
            PermissionDenied: unsigned, unknown signer, tampered, expired or replayed (the
                message says which).
            InvalidName: the study breaks the name rule.
        """
        signer = self.verify_signer(envelope, study=study, now=now)
        if signer.identity.kind is Kind.SITE:
            _check_site_request(signer.identity, envelope)
            return envelope
        return msgspec.structs.replace(envelope, actor=actor_of(signer.identity,
                                                                envelope.actor))

    def verify_signer(self, envelope: api.Envelope, *, study: str | None = None,
                      now: float | None = None) -> Verified:
        """Who signed the envelope, once signature, freshness and nonce check out (what that
        signer may ask is for the caller to decide).

        Raises:
            PermissionDenied: unsigned, unknown signer, tampered, expired or replayed (the
                message says which).
            InvalidName: the study breaks the name rule.
        """
        t = time.time() if now is None else now
        for name in (study, envelope.study):
            if name is not None:
                check_name(name, "study")
        if study is not None and envelope.study not in (None, study):
            raise InvalidName(f"the request names study {envelope.study!r} but was sent to "
                              f"{study!r}", field="study")
        if not envelope.signature or not envelope.key_id:
            raise PermissionDenied("unsigned request: this federation accepts only requests "
                                   "signed with a provisioned credential", field="signature")
        try:
            signer = verify_credential(envelope.key_id, self.roots, now=t)
        except CredentialError as exc:
            raise PermissionDenied(f"the signer's credential is not valid: {exc}",
                                   field="key_id") from None
        if not verify(signer.user_key, signed_bytes(envelope),
                      decode_b64_any(envelope.signature)):
            raise PermissionDenied("tampered request: the signature does not match its "
                                   "contents", field="signature")
        expires = envelope.expires.timestamp() if envelope.expires else 0.0
        if expires <= t:
            raise PermissionDenied("expired request: sign it again", field="expires")
        if expires > t + MAX_LIFETIME_S:
            raise PermissionDenied(f"a request may be valid for at most {MAX_LIFETIME_S:g}s",
                                   field="expires")
        self._remember(envelope.nonce or "", expires, t)
        return signer

    def _remember(self, nonce: str, expires: float, now: float) -> None:
        if len(nonce) < 16:
            raise PermissionDenied("a signed request needs a nonce", field="nonce")
        for old in [n for n, e in self._nonces.items() if e <= now]:
            del self._nonces[old]
        if nonce in self._nonces:
            raise PermissionDenied("replayed request: this nonce was used before",
                                   field="nonce")
        self._nonces[nonce] = expires


def _check_site_request(identity: Identity, envelope: api.Envelope) -> None:
    """A site may submit jobs only in the check-job study and only onto itself (the
    snapshotter's node-collection jobs), in the name of the admin it states."""
    from cairn.spec.runtime import VALIDATION_STUDY

    request = envelope.request
    if envelope.study != VALIDATION_STUDY:
        raise PermissionDenied(f"a site may make requests only in study {VALIDATION_STUDY}",
                               field="key_id")
    if isinstance(request, api.JobShow | api.JobList | api.StudyShow):
        return
    if not isinstance(request, api.Submit):
        raise PermissionDenied("a site may only submit and read its own check jobs",
                               field="key_id")
    for role in request.spec.roles:
        if list(role.sites or ()) != [identity.site]:
            raise PermissionDenied(f"site {identity.site} may submit jobs only onto itself",
                                   field="roles")


def actor_of(identity: Identity, claimed: str | None) -> str:
    """Who a request is from: an admin is who signed it; the hub's services (the validator's
    check jobs) name the admin they act for, since the hub is trusted with every study."""
    if identity.kind is Kind.HUB and claimed:
        return claimed
    if identity.kind is Kind.ADMIN:
        return identity.name
    raise PermissionDenied(f"a {identity.kind.value} may not make admin requests",
                           field="key_id")

