"""Signed requests: every `cairn.api` envelope is signed by its sender's credential key.

What is signed is exactly what is sent. The sender encodes its envelope once, with
`signature` null (the envelope's last field, so its JSON ends `"signature":null}`), signs
those bytes, and sends the same bytes with `null` replaced by the signature. The receiver
undoes that one splice on the bytes that arrived and checks the signature over the result:
nothing is re-encoded on either side, so any value the schema accepts (an int in a float
field, a tuple for a list, a field the receiver does not know yet) verifies.

Requests of clients from before this scheme signed the envelope as the receiver re-encodes
it; the verifier still accepts that form when the splice does not verify (it costs one more
encode and check, on that path only).

The signature is Ed25519 by the nkey of the sender's credential (base64url), `key_id`
carries the credential itself (so the verifier checks it back to the root with nothing
stored), `nonce` makes each request single-use (`UsedNonces`: durably, in the coordinator's
KV bucket), and `expires` bounds how long it can be replayed at all. The verdict names the
one thing that failed.
"""

from __future__ import annotations

import base64
import os
import re
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

from cairn import api
from cairn.errors import CairnError, InvalidName, PermissionDenied, Unavailable
from cairn.names import check_name
from cairn.trust.credentials import Identity, Kind, Verified, verify_credential
from cairn.trust.nkeyjwt import (
    CredentialError,
    decode_b64_any,
    read_creds_file,
    read_roots_file,
    sign,
    verify,
)

if TYPE_CHECKING:
    from cairn.bus import Bus
    from cairn.bus._claims import Claims

LIFETIME_S = 60.0
MAX_LIFETIME_S = 300.0
"""The longest a signed request is valid: also how long its nonce is remembered."""
NONCE_CHECK_TIMEOUT_S = 2.0
_ENCODER = msgspec.json.Encoder()
_ENVELOPE = msgspec.json.Decoder(api.Envelope)

_UNSIGNED_TAIL = b'"signature":null}'
# The signature as the last member of the envelope object: base64 (either alphabet).
_SIGNED_TAIL = re.compile(rb'"signature":"([A-Za-z0-9_+/=-]{1,256})"\}\Z')
_TAIL_BYTES = len(b'"signature":""}') + 256
NONCE = re.compile(r"[A-Za-z0-9_-]{16,128}")
"""A nonce: base64url, 16 to 128 characters (also what makes it a safe KV key)."""

RAW_REQUEST: ContextVar[bytes | None] = ContextVar("cairn_raw_request", default=None)
"""The request's bytes as they arrived (set by the service runtime while it is handled)."""


def signed_bytes(raw: bytes) -> bytes | None:
    """The bytes the sender signed, recovered from the bytes that arrived: the signature
    (the last member) set back to null. None when `raw` does not end with a signature."""
    found = _SIGNED_TAIL.search(raw, max(0, len(raw) - _TAIL_BYTES))
    if found is None:
        return None
    return raw[:found.start()] + _UNSIGNED_TAIL


def legacy_signed_bytes(envelope: api.Envelope) -> bytes:
    """What clients before the splice signed: the envelope with `signature` empty, as the
    receiver re-encodes it (a round trip, so an int sent in a float field is `600.0`)."""
    unsigned = _ENCODER.encode(msgspec.structs.replace(envelope, signature=None))
    return _ENCODER.encode(_ENVELOPE.decode(unsigned))


class RequestSigner:
    """Signs envelopes with one credential's key (an admin's, or a service's)."""

    def __init__(self, jwt: str, seed: str) -> None:
        self.jwt = jwt
        self._seed = seed

    @classmethod
    def from_creds(cls, path: str | Path) -> RequestSigner:
        """The signer of a `.creds` file (read bounded; `InvalidInput` naming it if not)."""
        jwt, seed = read_creds_file(path)
        return cls(jwt, seed)

    def sign(self, envelope: api.Envelope, *, now: float | None = None,
             lifetime_s: float = LIFETIME_S) -> bytes:
        """The bytes to send: `envelope` with a fresh nonce, its expiry, this credential as
        `key_id`, and the signature over exactly these bytes (with it null) spliced in."""
        t = time.time() if now is None else now
        unsigned = _ENCODER.encode(msgspec.structs.replace(
            envelope, nonce=base64.urlsafe_b64encode(os.urandom(18)).decode(),
            expires=datetime.fromtimestamp(t + lifetime_s, UTC), key_id=self.jwt,
            signature=None))
        if not unsigned.endswith(_UNSIGNED_TAIL):  # the Envelope's field order is the contract
            raise CairnError("cannot sign: the envelope's JSON does not end with its "
                             "signature field")
        signature = base64.urlsafe_b64encode(sign(self._seed, unsigned)).rstrip(b"=")
        return unsigned[:-len(b"null}")] + b'"' + signature + b'"}'


class UsedNonces(Protocol):
    """Where a verifier records the nonces it has accepted."""

    async def first_use(self, nonce: str, *, signer: str) -> bool:
        """Record `nonce`; True the first time, False when it was recorded before.

        Raises:
            Unavailable: it cannot tell (then the request must be refused).
        """
        ...


class MemoryNonces:
    """Nonces remembered by one process until they expire: for tools and tests. A
    federation's coordinator uses `BucketNonces`, which survive a restart."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}

    async def first_use(self, nonce: str, *, signer: str) -> bool:
        now = time.monotonic()
        for old in [n for n, until in self._seen.items() if until <= now]:
            del self._seen[old]
        if nonce in self._seen:
            return False
        self._seen[nonce] = now + MAX_LIFETIME_S
        return True


class BucketNonces:
    """Nonces in a KV bucket whose entries live `MAX_LIFETIME_S`, each created with KV
    `create` (which fails when the key exists): a replay after a restart of the
    coordinator, or sent to a second one, finds its nonce there."""

    def __init__(self, bus: Bus, bucket: str) -> None:
        self._bus = bus
        self._bucket = bucket
        self._claims: Claims | None = None

    async def first_use(self, nonce: str, *, signer: str) -> bool:
        from cairn.bus import claims

        if self._claims is None:
            self._claims = await claims(self._bus, self._bucket, ttl=MAX_LIFETIME_S,
                                        timeout=NONCE_CHECK_TIMEOUT_S)
        try:
            return await self._claims.claim(nonce, signer.encode())
        except Unavailable:
            self._claims = None  # opened again on the next request (a deleted bucket, ...)
            raise


class RequestVerifier:
    """A service's check of every request against the federation's roots."""

    def __init__(self, roots: frozenset[str], nonces: UsedNonces) -> None:
        self.roots = roots
        self.nonces = nonces

    @classmethod
    def from_kit(cls, creds: str | Path, nonces: UsedNonces) -> RequestVerifier:
        """The verifier of the kit holding `creds` (its `roots.txt`, read bounded)."""
        return cls(read_roots_file(Path(creds).parent / "roots.txt"), nonces)

    async def verify(self, raw: bytes, envelope: api.Envelope, *, study: str | None = None,
                     now: float | None = None) -> api.Envelope:
        """The envelope decoded from `raw`, with `actor` set to the verified identity; its
        nonce is recorded as used.

        Raises:
            PermissionDenied: unsigned, unknown signer, tampered, expired or replayed (the
                message says which).
            InvalidName: the study breaks the name rule.
            Unavailable: whether the nonce was used before cannot be told.
        """
        verified, signer = self.check(raw, envelope, study=study, now=now)
        assert verified.nonce is not None  # check() refuses a request without one
        if not await self.nonces.first_use(verified.nonce, signer=signer):
            raise PermissionDenied("replayed request: this nonce was used before",
                                   field="nonce")
        return verified

    async def verify_signer(self, raw: bytes, envelope: api.Envelope, *,
                            study: str | None = None, now: float | None = None) -> Verified:
        """Who signed the request, once its signature, freshness and nonce check out (what
        that signer may ask is for the caller to decide: the launcher's log API does).

        Raises:
            PermissionDenied: unsigned, unknown signer, tampered, expired or replayed.
            Unavailable: whether the nonce was used before cannot be told.
        """
        signer = self._signer(raw, envelope, study=study, now=now)
        assert envelope.nonce is not None  # _signer refuses a request without one
        if not await self.nonces.first_use(envelope.nonce, signer=signer.identity.name):
            raise PermissionDenied("replayed request: this nonce was used before",
                                   field="nonce")
        return signer

    def check(self, raw: bytes, envelope: api.Envelope, *, study: str | None = None,
              now: float | None = None) -> tuple[api.Envelope, str]:
        """Everything `verify` checks but the nonce's first use: (the envelope with its
        verified actor, the signer's name)."""
        signer = self._signer(raw, envelope, study=study, now=now)
        if signer.identity.kind is Kind.SITE:
            _check_site_request(signer.identity, envelope)
            return envelope, signer.identity.name
        return (msgspec.structs.replace(envelope, actor=actor_of(signer.identity,
                                                                 envelope.actor)),
                signer.identity.name)

    def _signer(self, raw: bytes, envelope: api.Envelope, *, study: str | None,
                now: float | None) -> Verified:
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
        signature = decode_b64_any(envelope.signature)
        # The spliced signature must be the one decoded (not some other `signature` member).
        spliced = signed_bytes(raw) if raw.endswith(
            b'"' + envelope.signature.encode() + b'"}') else None
        if not ((spliced is not None and verify(signer.user_key, spliced, signature))
                or verify(signer.user_key, legacy_signed_bytes(envelope), signature)):
            raise PermissionDenied("tampered request: the signature does not match its "
                                   "contents", field="signature")
        expires = envelope.expires.timestamp() if envelope.expires else 0.0
        if expires <= t:
            raise PermissionDenied("expired request: sign it again", field="expires")
        if expires > t + MAX_LIFETIME_S:
            raise PermissionDenied(f"a request may be valid for at most {MAX_LIFETIME_S:g}s",
                                   field="expires")
        if not envelope.nonce or not NONCE.fullmatch(envelope.nonce):
            raise PermissionDenied("a signed request needs a nonce of 16 to 128 base64url "
                                   "characters", field="nonce")
        return signer


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

