"""Cairn credentials: who a connection is, as a NATS JWT signed by the federation's root.

Every participant holds a `.creds` file: a user nkey seed and a JWT whose `sub` is that
user's public key and whose `cairn` claim says who it is (`Identity`). The root key
(provisioning) signs those of the hub, sites and admins. A site's credential also certifies
the site's *signing key*; with it the site's launcher mints job-lifetime worker credentials
itself (no round trip, and it works for a site provisioned the distributed way: the site's
private keys never left it). A worker credential carries its site's credential as `chain`,
so the authority checks root -> site -> worker with nothing but the root's public key.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

import msgspec

from cairn.names import check_name
from cairn.trust.nkeyjwt import (
    CredentialError,
    KeyKind,
    decode_jwt,
    encode_jwt,
    kind_of,
    new_seed,
    public_key,
)


class Kind(StrEnum):
    HUB = "hub"  # the hub's parent: coordinator, validator and the hub site's services
    SITE = "site"  # one site's parent: agent, launcher, snapshotter
    ADMIN = "admin"  # a person (or program) acting for an admin
    WORKER = "worker"  # one worker of one job, for that job's lifetime
    READER = "reader"  # an outside system that reads one study's events (and data, if asked)
    API = "api"  # the HTTP API service: reads for its callers, passes on their signed requests


API_NAME = "api"
"""The HTTP API service's identity (`Kind.API`) and its kit's folder: one per federation."""


class Identity(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who a credential says its holder is.

    Attributes:
        kind: What sort of participant.
        name: `site-a`, `alice@org-a`, or a worker's `<job>/<site>/<role>/<attempt>`.
        site: The site (hub, site and worker identities).
        org: The organisation (sites and admins).
        study: A worker's study.
        job: A worker's job.
        role: A worker's role in its job.
        attempt: A worker's attempt.
        signing_key: A site's public signing key (`A...`), with which it mints workers.
        admin_role: An admin's federation role (`project_admin` sees every study).
        data: A reader that may also read its study's data plane and job files.
    """

    kind: Kind
    name: str
    site: str = ""
    org: str = ""
    study: str = ""
    job: str = ""
    role: str = ""
    attempt: int = 0
    signing_key: str = ""
    admin_role: str = ""
    data: bool = False


class Verified(msgspec.Struct, frozen=True, kw_only=True):
    """A credential that checked out: its identity, user key, id and expiry (0 = none)."""

    identity: Identity
    user_key: str
    jti: str
    expires: int = 0
    site_jti: str = ""


def issue(identity: Identity, user_key: str, issuer_seed: str, *, expires: int = 0,
          chain: str = "") -> str:
    """A credential JWT for `user_key` (a `U...` public key) saying it is `identity`."""
    if kind_of(user_key) is not KeyKind.USER:
        raise CredentialError("a credential's subject must be a user public key (U...)")
    claims: dict[str, Any] = {"sub": user_key, "name": identity.name,
                              "cairn": msgspec.to_builtins(identity)}
    if expires:
        claims["exp"] = int(expires)
    if chain:
        claims["cairn_chain"] = chain
    return encode_jwt(claims, issuer_seed)


def _identity_of(claims: dict[str, Any]) -> Identity:
    try:
        return msgspec.convert(claims.get("cairn"), Identity)
    except msgspec.ValidationError as exc:
        raise CredentialError(f"not a Cairn credential: {exc}") from None


def verify_credential(token: str, roots: frozenset[str], *,
                      now: float | None = None) -> Verified:
    """Check a credential back to one of `roots`; a worker's through its site's credential.

    Raises:
        CredentialError: the message names what failed (root, signature, expiry, chain).
    """
    t = time.time() if now is None else now
    claims = _peek_issuer(token)
    if claims.get("cairn_chain"):
        site = verify_credential(str(claims["cairn_chain"]), roots, now=t)
        if site.identity.kind not in (Kind.SITE, Kind.HUB) or not site.identity.signing_key:
            raise CredentialError("a worker credential must be minted by a site")
        claims = decode_jwt(token, now=t, issuers=frozenset({site.identity.signing_key}))
        identity = _identity_of(claims)
        if identity.kind is not Kind.WORKER or identity.site != site.identity.site:
            raise CredentialError("a site may mint workers of its own site only")
        if not claims.get("exp"):
            raise CredentialError("a worker credential must expire")
        return Verified(identity=identity, user_key=str(claims.get("sub", "")),
                        jti=str(claims.get("jti", "")), expires=int(claims["exp"]),
                        site_jti=site.jti)
    claims = decode_jwt(token, now=t, issuers=roots)
    identity = _identity_of(claims)
    if identity.kind is Kind.WORKER:
        raise CredentialError("a worker credential must be minted by its site")
    return Verified(identity=identity, user_key=str(claims.get("sub", "")),
                    jti=str(claims.get("jti", "")), expires=int(claims.get("exp") or 0))


def _peek_issuer(token: str) -> dict[str, Any]:
    from cairn.trust.nkeyjwt import peek_claims

    return peek_claims(token)


def mint_worker(*, site_jwt: str, signing_seed: str, study: str, job: str, site: str,
                role: str, attempt: int, expires: int, launch_id: str) -> tuple[str, str]:
    """A worker's credential, minted by its site: (jwt, user seed). Its name is the
    launch id, by which the authority cuts it off when the worker ends."""
    for value, kind in ((study, "study"), (job, "job"), (site, "site"), (role, "role")):
        check_name(value, kind)
    seed = new_seed(KeyKind.USER)
    identity = Identity(kind=Kind.WORKER, name=launch_id, site=site,
                        study=study, job=job, role=role, attempt=attempt)
    return issue(identity, public_key(seed), signing_seed, expires=expires,
                 chain=site_jwt), seed
