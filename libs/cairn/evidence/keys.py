"""Ed25519 signing keys: create, load, and a key id derived from the public key.

A key pair lives in two PEM files side by side: `NAME.key` (PKCS#8 private key, created with
mode 0600 and refused when anyone but its owner can read it, as ssh does) and `NAME.pub`
(SubjectPublicKeyInfo). The key id is the sha256 of the raw 32-byte public key in hex, so
anyone holding the public key computes the same id without being told it.

This module is a stable API: the evidence signer, deployment-bundle signing and provisioning
all use it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from cairn.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from cairn.files import PEM_FILE_BYTES, read_bytes, read_text

PRIVATE_SUFFIX = ".key"
PUBLIC_SUFFIX = ".pub"


def key_id_of(public_key: Ed25519PublicKey) -> str:
    """The key id of a public key: hex sha256 of its raw 32 bytes."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class VerifyingKey:
    """A public Ed25519 key and its id."""

    public_key: Ed25519PublicKey
    key_id: str

    @classmethod
    def from_public_key(cls, public_key: Ed25519PublicKey) -> VerifyingKey:
        return cls(public_key=public_key, key_id=key_id_of(public_key))

    def verify(self, signature: bytes, message: bytes) -> bool:
        """True when `signature` is this key's Ed25519 signature of `message`."""
        try:
            self.public_key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def public_pem(self) -> str:
        """The public key as SubjectPublicKeyInfo PEM text."""
        return self.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode()

    def public_raw_b64(self) -> str:
        """The raw 32-byte public key in base64 (how trust lists carry it)."""
        raw = self.public_key.public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return base64.b64encode(raw).decode()


@dataclass(frozen=True)
class SigningKey:
    """A private Ed25519 key, its id, and its public half."""

    private_key: Ed25519PrivateKey
    key_id: str

    @classmethod
    def generate(cls) -> SigningKey:
        """A fresh key pair (in memory only; see `create_key_files` to keep it)."""
        private_key = Ed25519PrivateKey.generate()
        return cls(private_key=private_key, key_id=key_id_of(private_key.public_key()))

    @property
    def verifying_key(self) -> VerifyingKey:
        return VerifyingKey.from_public_key(self.private_key.public_key())

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of `message` (64 bytes)."""
        return self.private_key.sign(message)

    def private_pem(self) -> bytes:
        return self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def key_paths(stem: Path) -> tuple[Path, Path]:
    """The private and public file of the key pair named by `stem` (e.g. `keys/site-a`)."""
    return stem.with_name(stem.name + PRIVATE_SUFFIX), stem.with_name(stem.name + PUBLIC_SUFFIX)


def create_key_files(stem: Path, *, overwrite: bool = False) -> SigningKey:
    """Generate a key pair and write `STEM.key` (mode 0600) and `STEM.pub`.

    Raises:
        Conflict: either file exists and `overwrite` is false.
    """
    private_path, public_path = key_paths(stem)
    if not overwrite:
        for path in (private_path, public_path):
            if path.exists():
                raise Conflict("exists; pass --force (overwrite=True) to replace it",
                               file=str(path))
    key = SigningKey.generate()
    stem.parent.mkdir(parents=True, exist_ok=True)
    private_path.unlink(missing_ok=True)
    # O_EXCL with mode 0600 at creation: the private key is never readable by others,
    # not even for the instant between creating and chmod-ing the file.
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.private_pem())
    public_path.write_text(key.verifying_key.public_pem())
    return key


def load_signing_key(path: Path) -> SigningKey:
    """Load a PEM Ed25519 private key file that only its owner can read.

    Raises:
        NotFound: no such file.
        PermissionDenied: the file is readable or writable by group or others.
        InvalidInput: the file is not a PEM Ed25519 private key.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise NotFound(f"no private key file {path}", file=str(path)) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionDenied(
            f"private key file has mode {stat.S_IMODE(mode):04o}; it must be 0600 "
            f"(chmod 600 {path})", file=str(path))
    data = read_bytes(path, limit=PEM_FILE_BYTES)
    try:
        loaded = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise InvalidInput(f"not a PEM private key: {exc}", file=str(path)) from None
    if not isinstance(loaded, Ed25519PrivateKey):
        raise InvalidInput("not an Ed25519 private key", file=str(path))
    return SigningKey(private_key=loaded, key_id=key_id_of(loaded.public_key()))


def parse_public_key(text: str, *, source: str = "<input>") -> VerifyingKey:
    """A public key from PEM text or from its raw 32 bytes in base64.

    Raises:
        InvalidInput: neither form, or not an Ed25519 key.
    """
    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            loaded = serialization.load_pem_public_key(text.encode())
        except (ValueError, TypeError) as exc:
            raise InvalidInput(f"not a PEM public key: {exc}", file=source) from None
        if not isinstance(loaded, Ed25519PublicKey):
            raise InvalidInput("not an Ed25519 public key", file=source)
        return VerifyingKey.from_public_key(loaded)
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise InvalidInput("public key is neither PEM nor base64", file=source) from None
    if len(raw) != 32:
        raise InvalidInput(f"a raw Ed25519 public key has 32 bytes, not {len(raw)}",
                           file=source)
    return VerifyingKey.from_public_key(Ed25519PublicKey.from_public_bytes(raw))


def load_public_key(path: Path) -> VerifyingKey:
    """Load a public key file (PEM or base64 raw).

    Raises:
        NotFound: no such file.
        InvalidInput: not an Ed25519 public key.
    """
    if not path.exists() and not path.is_symlink():
        raise NotFound(f"no public key file {path}", file=str(path))
    return parse_public_key(read_text(path, limit=PEM_FILE_BYTES), source=str(path))
