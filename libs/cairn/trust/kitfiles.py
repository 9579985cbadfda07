"""Reading the files of a kit and of the provisioning folder, bounded (`cairn.files`): seeds,
PEM files, the CA, the authority's revocation list. Each refusal names the file (exit 3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cairn import files
from cairn.errors import InvalidInput
from cairn.trust.nkeyjwt import CredentialError, seed_public_key

REVOKED_FILE_BYTES = 16 * files.MIB
"""`authority/revoked.json`: names and credential ids, a few hundred thousand at most."""


def read_seed(path: Path) -> str:
    """The nkey seed a file holds, read bounded.

    Raises:
        InvalidInput: naming the file: unreadable, too large, not UTF-8 or not a seed.
    """
    seed = files.read_text(path, limit=files.SMALL_FILE_BYTES).strip()
    try:
        seed_public_key(seed)
    except CredentialError as exc:
        raise InvalidInput(str(exc), file=str(path)) from None
    return seed


def read_pem(path: Path) -> bytes:
    """A PEM file's bytes (a CA, a certificate, a key), read bounded."""
    data = files.read_bytes(path, limit=files.PEM_FILE_BYTES)
    if b"-----BEGIN " not in data:
        raise InvalidInput("not a PEM file", file=str(path))
    return data


def read_ca(path: Path) -> bytes:
    """The federation CA certificate(s) a PEM file holds, read bounded and parsed.

    Raises:
        InvalidInput: naming the file: unreadable, too large, or no PEM certificate.
    """
    from cryptography import x509

    data = read_pem(path)
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise InvalidInput(f"not a PEM certificate: {exc}", file=str(path)) from None
    return data


def read_revoked(path: Path) -> dict[str, Any]:
    """The authority's revocation file, read bounded.

    Raises:
        InvalidInput: naming the file: unreadable, too large, or not `{"names": [...],
            "jtis": [...]}`.
    """
    text = files.read_text(path, limit=REVOKED_FILE_BYTES)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"not JSON: {exc}", file=str(path)) from None
    lists = {key: data.get(key, []) if isinstance(data, dict) else None
             for key in ("names", "jtis")}
    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
               for v in lists.values()):
        raise InvalidInput('expected {"names": [...], "jtis": [...]} of strings',
                           file=str(path))
    return {**(data if isinstance(data, dict) else {}), **lists}
