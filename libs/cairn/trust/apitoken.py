"""Bearer tokens for the HTTP API: minted by the caller from its own credential, short-lived.

A token is `cairn1.<claims>.<signature>` (base64url, no padding): the claims are JSON
`{"aud": "cairn-api", "cred": <the caller's credential JWT>, "iat": ..., "exp": ...}` and the
signature is Ed25519 by the credential's own user key over `cairn1.<claims>`. So the API
checks a token with nothing but the federation's roots (the credential back to a root, the
signature to the credential's key): no token store, no server-side secret, and a token
proves exactly what the credential does, for at most `MAX_LIFETIME_S`.

A token is a bearer secret for its lifetime (unlike a signed request, it is not
single-use): that is why it is short and why it only reads. Every write through the API is
the caller's own signed request envelope (`cairn.trust.requests`), passed through unchanged.
"""

from __future__ import annotations

import base64
import time

import msgspec

from cairn.errors import PermissionDenied
from cairn.trust.credentials import Verified, verify_credential
from cairn.trust.nkeyjwt import CredentialError, public_key, sign, verify

PREFIX = "cairn1"
AUDIENCE = "cairn-api"
DEFAULT_LIFETIME_S = 900
MAX_LIFETIME_S = 3600
"""The longest a token may live: a leaked token reads for at most this long."""
MAX_TOKEN_BYTES = 16 * 1024
CLOCK_SKEW_S = 30


class TokenClaims(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    aud: str
    cred: str
    iat: int
    exp: int


_CLAIMS = msgspec.json.Decoder(TokenClaims)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint(jwt: str, seed: str, *, lifetime_s: int = DEFAULT_LIFETIME_S,
         now: float | None = None) -> str:
    """A token for the credential (`jwt`, its user `seed`), valid `lifetime_s` seconds.

    Raises:
        PermissionDenied: `lifetime_s` is not within 1..MAX_LIFETIME_S.
    """
    if not 0 < lifetime_s <= MAX_LIFETIME_S:
        raise PermissionDenied(f"a token may live 1 to {MAX_LIFETIME_S} seconds, not "
                               f"{lifetime_s}", field="lifetime")
    t = int(time.time() if now is None else now)
    claims = msgspec.json.encode(TokenClaims(aud=AUDIENCE, cred=jwt, iat=t,
                                             exp=t + lifetime_s))
    signed = f"{PREFIX}.{_b64(claims)}"
    return f"{signed}.{_b64(sign(seed, signed.encode()))}"


def check(token: str, roots: frozenset[str], *, now: float | None = None) -> Verified:
    """Who a token is from, once its credential, signature and lifetime check out.

    Raises:
        PermissionDenied: the message names the one thing that failed (shape, credential,
            signature, audience, expiry or lifetime).
    """
    t = time.time() if now is None else now
    if len(token) > MAX_TOKEN_BYTES:
        raise PermissionDenied(f"a token is at most {MAX_TOKEN_BYTES} bytes", field="token")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise PermissionDenied(f"not a Cairn API token (expected {PREFIX}.<claims>.<sig>: "
                               "`cairn api token`)", field="token")
    try:
        claims = _CLAIMS.decode(_unb64(parts[1]))
        signature = _unb64(parts[2])
    except (ValueError, msgspec.DecodeError) as exc:
        raise PermissionDenied(f"malformed token: {exc}", field="token") from None
    if claims.aud != AUDIENCE:
        raise PermissionDenied(f"a token for {claims.aud!r}, not {AUDIENCE!r}", field="token")
    try:
        verified = verify_credential(claims.cred, roots, now=t)
    except CredentialError as exc:
        raise PermissionDenied(f"the token's credential is not valid: {exc}",
                               field="token") from None
    if not verify(verified.user_key, f"{parts[0]}.{parts[1]}".encode(), signature):
        raise PermissionDenied("the token's signature does not match its credential",
                               field="token")
    if claims.exp <= t:
        raise PermissionDenied("expired token: mint another (`cairn api token`)",
                               field="token")
    if claims.exp - claims.iat > MAX_LIFETIME_S or claims.iat > t + CLOCK_SKEW_S:
        raise PermissionDenied(f"a token may live at most {MAX_LIFETIME_S}s from when it was "
                               "minted", field="token")
    return verified


def mint_from_creds(path: str, *, lifetime_s: int = DEFAULT_LIFETIME_S) -> str:
    """A token for the credentials file at `path` (read bounded)."""
    from cairn.trust.nkeyjwt import read_creds_file

    jwt, seed = read_creds_file(path)
    public_key(seed)  # a seed that is not one fails here, naming nothing secret
    return mint(jwt, seed, lifetime_s=lifetime_s)
