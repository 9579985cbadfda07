"""How a Cairn credentials file becomes nats-py connect options."""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn.trust.nkeyjwt import public_key, read_creds_file
from cairn.trust.permissions import inbox_prefix

if TYPE_CHECKING:
    from cairn.bus import Bus
    from cairn.trust.credentials import Identity


def creds_options(path: str) -> dict[str, Any]:
    """`user_credentials`, `token` and `inbox_prefix` for a `.creds` file.

    nats-server forwards the CONNECT token (not the JWT) to an auth callout, so the JWT is
    sent as the token too; the seed still signs the server's nonce, which proves possession.

    Raises:
        InvalidInput: the file is missing or is not a credentials file.
    """
    jwt, seed = read_creds_file(path)
    return {"user_credentials": path, "token": jwt,
            "inbox_prefix": inbox_prefix(public_key(seed))}


def identity_of(path: str) -> Identity:
    """Who a credentials file says its holder is (unverified: the authority verifies).

    Raises:
        InvalidInput: the file is not a Cairn credential.
    """
    import msgspec

    from cairn.errors import InvalidInput
    from cairn.trust.credentials import Identity
    from cairn.trust.nkeyjwt import CredentialError, peek_claims

    jwt, _ = read_creds_file(path)  # bounded; InvalidInput names what is wrong
    try:
        return msgspec.convert(peek_claims(jwt).get("cairn"), Identity)
    except (msgspec.ValidationError, CredentialError) as exc:
        raise InvalidInput(f"not a Cairn credential: {exc}", file=path) from None


def consumer_names(path: str) -> tuple[str, tuple[str, ...]]:
    """The consumer names a connection with this credentials file may use: (owner, names);
    no names for the hub, which may use any.

    Raises:
        InvalidInput: the file is not a Cairn credential.
    """
    from cairn.subjects.table import EPHEMERAL_SLOTS, WORKER_SLOTS, consumer_owner, owned_names
    from cairn.trust.credentials import Kind

    identity = identity_of(path)
    owner = consumer_owner(identity.kind.value, identity.name, identity.site)
    if identity.kind is Kind.HUB:
        return owner, ()
    slots = WORKER_SLOTS if identity.kind is Kind.WORKER else EPHEMERAL_SLOTS
    return owner, owned_names(owner, slots)


def _file_of(env: Mapping[str, str], name: str) -> str | None:
    """`NAME` (a path) or `NAME_FILE` (a secret file's path); content is written to a file.

    A backend that can only pass secrets as values (not files) hands over the text itself.
    """
    value = env.get(name) or env.get(f"{name}_FILE")
    if not value:
        return None
    if value.lstrip().startswith("-----BEGIN"):
        import os
        import tempfile

        fd, path = tempfile.mkstemp(prefix="cairn-", suffix=f".{name.lower()}")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(value)
        return path
    return value


def worker_credentials(env: Mapping[str, str]) -> tuple[str | None, ssl.SSLContext | None]:
    """The credentials file and TLS context a worker connects with (None, None: insecure)."""
    from cairn.runtime.context import tls_context

    return _file_of(env, "CAIRN_CREDS"), tls_context(_file_of(env, "CAIRN_TLS_CA"), None, None)


async def member_studies(bus: Bus, site: str, *, strict: bool = False) -> set[str] | None:
    """The studies the authority says `site` is in; None when no authority answers (an
    insecure federation, where every study may be read).

    Raises:
        Unavailable, Timeout: with `strict`, a secure federation's authority did not answer
            (otherwise that reads as no studies, until the next scan).
    """
    from cairn import subjects
    from cairn.errors import Timeout, Unavailable

    try:
        reply = await bus.request(subjects.site_studies(site), b"", timeout=2.0)
    except Unavailable:
        # No authority: an insecure federation, or (with credentials) one whose authority
        # is restarting, where nothing new can be read until it is back.
        if bus.creds and strict:
            raise
        return set() if bus.creds else None
    except Timeout:
        if strict:
            raise
        return set()  # an authority that is slow to answer: try again on the next scan
    try:
        studies = json.loads(reply).get("studies", [])
    except (ValueError, AttributeError):
        return None
    return {s for s in studies if isinstance(s, str)}
