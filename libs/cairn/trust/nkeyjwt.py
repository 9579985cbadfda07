"""NATS nkeys and JWTs: Ed25519 keys in NATS's encoding, and `ed25519-nkey` JWTs.

A NATS JWT is `b64url(header).b64url(claims).b64url(signature)` with the header
`{"typ":"JWT","alg":"ed25519-nkey"}`; the signature covers the first two parts and is made
by the issuer's nkey (`iss`). This is the one place that makes, signs and checks them; the
`nkeys` package does the key encoding (and is what nats-py signs connect nonces with).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import time
from enum import IntEnum
from pathlib import Path
from typing import Any

import msgspec
import nkeys

from cairn import files
from cairn.errors import InvalidInput, PermissionDenied

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}


class KeyKind(IntEnum):
    """The nkey prefix byte: what a public key is for (its first letter)."""

    OPERATOR = nkeys.PREFIX_BYTE_OPERATOR  # O: the federation's root of trust
    ACCOUNT = nkeys.PREFIX_BYTE_ACCOUNT  # A: signing keys (authority, sites)
    USER = nkeys.PREFIX_BYTE_USER  # U: a connecting identity
    SERVER = nkeys.PREFIX_BYTE_SERVER  # N: a nats-server (signs auth requests)


class CredentialError(PermissionDenied):
    """A JWT or signature that does not check out (the message says why)."""


def new_seed(kind: KeyKind) -> str:
    """A fresh nkey seed (`S...`) for a key of `kind`."""
    return bytes(nkeys.encode_seed(os.urandom(32), int(kind))).decode()


def public_key(seed: str) -> str:
    """The public key (`O...`, `A...`, `U...`) of a seed."""
    return bytes(nkeys.from_seed(bytearray(seed.encode())).public_key).decode()


def sign(seed: str, data: bytes) -> bytes:
    return bytes(nkeys.from_seed(bytearray(seed.encode())).sign(data))


def _raw_public(key: str) -> tuple[int, bytes]:
    try:
        raw = base64.b32decode(key + "=" * (-len(key) % 8))
    except (binascii.Error, ValueError):
        raise CredentialError(f"{key[:12]}... is not an nkey") from None
    if len(raw) != 35 or nkeys.crc16(bytearray(raw[:-2])) != int.from_bytes(raw[-2:], "little"):
        raise CredentialError(f"{key[:12]}... is not an nkey (bad length or checksum)")
    return raw[0], raw[1:33]


def kind_of(key: str) -> KeyKind:
    prefix, _ = _raw_public(key)
    try:
        return KeyKind(prefix)
    except ValueError:
        raise CredentialError(f"{key[:12]}... has an unknown nkey prefix") from None


def verify(key: str, data: bytes, signature: bytes) -> bool:
    """Whether `signature` over `data` was made by the public nkey `key`."""
    from nacl.exceptions import BadSignatureError
    from nacl.signing import VerifyKey

    _, raw = _raw_public(key)
    try:
        VerifyKey(raw).verify(data, signature)
    except (BadSignatureError, ValueError):
        return False
    return True


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def decode_b64_any(text: str) -> bytes:
    """Standard or URL-safe base64, padded or not (clients differ)."""
    padded = text + "=" * (-len(text) % 4)
    try:
        return base64.urlsafe_b64decode(padded.replace("+", "-").replace("/", "_"))
    except (binascii.Error, ValueError):
        raise CredentialError("a signature is not base64") from None


def encode_jwt(claims: dict[str, Any], issuer_seed: str, *, now: float | None = None) -> str:
    """Sign `claims` as a NATS JWT by `issuer_seed`; fills `iss`, `iat` and `jti`."""
    body = dict(claims)
    body["iss"] = public_key(issuer_seed)
    body.setdefault("iat", int(now if now is not None else time.time()))
    body.pop("jti", None)
    # The jti is the hash of the claims without it, as NATS's own tools do.
    body["jti"] = base64.b32encode(hashlib.sha256(msgspec.json.encode(body)).digest()
                                   ).decode().rstrip("=")
    head = _b64(msgspec.json.encode(_HEADER))
    payload = _b64(msgspec.json.encode(body))
    signature = sign(issuer_seed, f"{head}.{payload}".encode())
    return f"{head}.{payload}.{_b64(signature)}"


def decode_jwt(token: str, *, now: float | None = None,
               issuers: frozenset[str] | None = None) -> dict[str, Any]:
    """Check a NATS JWT's signature (by its own `iss`) and expiry; return its claims.

    Args:
        issuers: When given, `iss` must be one of these public keys.

    Raises:
        CredentialError: malformed, wrong issuer, bad signature, not yet valid or expired.
    """
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise CredentialError("not a JWT (expected three dot-separated parts)")
    try:
        header = msgspec.json.decode(_unb64(parts[0]))
        claims = msgspec.json.decode(_unb64(parts[1]))
        signature = _unb64(parts[2])
    except (msgspec.DecodeError, binascii.Error, ValueError):
        raise CredentialError("not a JWT (undecodable parts)") from None
    if not isinstance(header, dict) or header.get("alg") != _HEADER["alg"]:
        raise CredentialError("not an ed25519-nkey JWT")
    if not isinstance(claims, dict) or not isinstance(claims.get("iss"), str):
        raise CredentialError("a JWT without an issuer")
    issuer: str = claims["iss"]
    if issuers is not None and issuer not in issuers:
        raise CredentialError("signed by a key this federation does not trust")
    if not verify(issuer, f"{parts[0]}.{parts[1]}".encode(), signature):
        raise CredentialError("the JWT's signature does not verify")
    t = now if now is not None else time.time()
    exp = claims.get("exp")
    if isinstance(exp, int | float) and exp > 0 and t >= exp:
        raise CredentialError("the credential has expired")
    nbf = claims.get("nbf")
    if isinstance(nbf, int | float) and nbf > 0 and t < nbf:
        raise CredentialError("the credential is not valid yet")
    return claims


def peek_claims(token: str) -> dict[str, Any]:
    """A JWT's claims WITHOUT checking anything (to find which key to check it with)."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise CredentialError("not a JWT (expected three dot-separated parts)")
    try:
        claims = msgspec.json.decode(_unb64(parts[1]))
    except (msgspec.DecodeError, binascii.Error, ValueError):
        raise CredentialError("not a JWT (undecodable claims)") from None
    if not isinstance(claims, dict):
        raise CredentialError("not a JWT (claims are not an object)")
    return claims


def creds_file_text(jwt: str, seed: str) -> str:
    """A `.creds` file as nats clients read it: the user JWT and its seed."""
    return (f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n")


def read_creds(text: str) -> tuple[str, str]:
    """(jwt, seed) of a `.creds` file's text."""
    jwt = seed = ""
    lines = [ln.strip() for ln in text.splitlines()]
    for i, line in enumerate(lines):
        if "BEGIN NATS USER JWT" in line and i + 1 < len(lines):
            jwt = lines[i + 1]
        if "BEGIN USER NKEY SEED" in line and i + 1 < len(lines):
            seed = lines[i + 1]
    if not jwt or not seed:
        raise CredentialError("not a credentials file (no user JWT and seed)")
    return jwt, seed


# -- files ------------------------------------------------------------------------------------
# What people hand over as files (a kit's .creds, a signed JWT, roots.txt) is read bounded,
# and a file that is not what it should be is invalid input naming the file (exit 3); only a
# well-formed credential that does not check out is a permission problem.

def read_creds_file(path: str | Path, *, shown: str | None = None) -> tuple[str, str]:
    """(jwt, seed) of a `.creds` file, both well formed.

    Raises:
        InvalidInput: naming the file: unreadable, too large, not UTF-8, not a credentials
            file, or holding a JWT or seed that is malformed.
    """
    file = shown or str(path)
    text = files.read_text(path, limit=files.SMALL_FILE_BYTES, shown=file)
    try:
        jwt, seed = read_creds(text)
        check_jwt_shape(jwt)
        seed_public_key(seed)
    except CredentialError as exc:
        raise InvalidInput(str(exc), file=file) from None
    return jwt, seed


def read_jwt_file(path: str | Path, *, shown: str | None = None) -> str:
    """The JWT a file holds (surrounding whitespace dropped), well formed but NOT verified.

    Raises:
        InvalidInput: naming the file: unreadable, too large, not UTF-8, or not a JWT.
    """
    file = shown or str(path)
    token = files.read_text(path, limit=files.SMALL_FILE_BYTES, shown=file).strip()
    try:
        check_jwt_shape(token)
    except CredentialError as exc:
        raise InvalidInput(str(exc), file=file) from None
    return token


def read_roots_file(path: str | Path, *, shown: str | None = None) -> frozenset[str]:
    """The root public keys (`O...`) a roots file lists, one per line.

    Raises:
        InvalidInput: naming the file: unreadable, too large, not UTF-8, empty, or a line
            that is not an operator nkey.
    """
    file = shown or str(path)
    text = files.read_text(path, limit=files.SMALL_FILE_BYTES, shown=file)
    roots: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        key = line.strip()
        if not key:
            continue
        try:
            kind = kind_of(key)
        except CredentialError as exc:
            raise InvalidInput(str(exc), file=file, line=number) from None
        if kind is not KeyKind.OPERATOR:
            raise InvalidInput(f"{key[:12]}... is not a root key (O...)", file=file,
                               line=number)
        roots.add(key)
    if not roots:
        raise InvalidInput("no root keys in the file", file=file)
    return frozenset(roots)


def check_jwt_shape(token: str) -> dict[str, Any]:
    """The claims of a token shaped like a NATS JWT (three parts, an `ed25519-nkey` header,
    claims with an issuer), checking no signature.

    Raises:
        CredentialError: it is not shaped like one.
    """
    parts = token.split(".")
    if len(parts) != 3:
        raise CredentialError("not a JWT (expected three dot-separated parts)")
    try:
        header = msgspec.json.decode(_unb64(parts[0]))
    except (msgspec.DecodeError, binascii.Error, ValueError):
        raise CredentialError("not a JWT (undecodable header)") from None
    if not isinstance(header, dict) or header.get("alg") != _HEADER["alg"]:
        raise CredentialError("not an ed25519-nkey JWT")
    claims = peek_claims(token)
    if not isinstance(claims.get("iss"), str):
        raise CredentialError("a JWT without an issuer")
    return claims


def seed_public_key(seed: str) -> str:
    """`public_key`, with a malformed seed a `CredentialError` rather than nkeys' own."""
    try:
        return public_key(seed)
    except (nkeys.NkeysError, binascii.Error, ValueError):
        raise CredentialError("not an nkey seed") from None
