"""The authority's decisions: who may connect, and with which permissions (no I/O here).

nats-server sends each connecting client's CONNECT options to the authority (auth callout)
as an authorization request JWT signed by the server. The authority checks the Cairn
credential (root -> [site ->] identity), the signature over the server's nonce (so a stolen
JWT alone is useless), revocations and, for a worker, that its job and its launch are still
running; then it answers with a user JWT for the APP account that carries the identity's
permissions, computed from live membership. A refusal is answered with its reason, which
the server logs.

Every user JWT expires: after `session_s` (renewed before then by a reconnect the authority
asks for), and never after the credential itself (a worker's: its job's timeout and a grace).
So no decision outlives its bound, even one the authority could not act on while it was down.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.trust.credentials import Identity, Kind, Verified, verify_credential
from cairn.trust.natsconfig import APP_ACCOUNT
from cairn.trust.nkeyjwt import (
    CredentialError,
    KeyKind,
    decode_b64_any,
    decode_jwt,
    encode_jwt,
    kind_of,
    verify,
)
from cairn.trust.permissions import Membership, Permissions, permissions, studies_of

SESSION_S = 900.0
"""How long an admitted connection's user JWT lasts before it must connect again."""


@dataclass(frozen=True)
class Connection:
    """One admitted connection, to find it again when it must be disconnected.

    Attributes:
        user_nkey: The key the server gave the connection (its `authorized_user` is the
            identity's name; the nkey is what the issued JWT names).
        expires: When its user JWT expires (unix seconds).
    """

    server_id: str
    client_id: int
    identity: Identity
    user_key: str
    jti: str
    site_jti: str
    permissions: Permissions
    studies: tuple[str, ...] = ()
    user_nkey: str = ""
    expires: int = 0
    renewable: bool = True
    """Whether a reconnect would extend `expires` (false once the credential's own expiry,
    not the session's, is what ends it)."""


@dataclass
class Decision:
    response: str
    connection: Connection | None = None
    reason: str = ""


@dataclass
class Authorizer:
    """What the authority knows: trusted roots, its issuing key, membership, revocations.

    Attributes:
        roots: Public keys of the federation roots whose credentials are accepted.
        issuer_seed: The callout issuer's account seed (the server config names its key).
        membership: Study -> sites and admins, as the study streams say now.
        revoked_names: Identity names refused (sites, admins, workers' launch ids).
        revoked_jtis: Credential ids refused.
        ended_jobs: Jobs whose workers are refused (the job ended).
    """

    roots: frozenset[str]
    issuer_seed: str
    session_s: float = SESSION_S
    membership: dict[str, Membership] = field(default_factory=dict)
    revoked_names: set[str] = field(default_factory=set)
    revoked_jtis: set[str] = field(default_factory=set)
    ended_jobs: set[tuple[str, str]] = field(default_factory=set)

    def decide(self, request_jwt: str, *, now: float | None = None) -> Decision:
        """Answer one authorization request (the JWT the server sent)."""
        t = time.time() if now is None else now
        try:
            request = decode_jwt(request_jwt, now=t)
            if kind_of(str(request.get("iss", ""))) is not KeyKind.SERVER:
                raise CredentialError("the request was not signed by a nats-server")
        except CredentialError as exc:
            return Decision(response="", reason=f"bad authorization request: {exc}")
        nats: dict[str, Any] = request.get("nats") or {}
        user_nkey = str(nats.get("user_nkey", ""))
        server_id = str((nats.get("server_id") or {}).get("id", request["iss"]))
        client: dict[str, Any] = nats.get("client_info") or {}
        try:
            verified = self._verify(nats, t)
        except CredentialError as exc:
            return Decision(response=self._refuse(user_nkey, server_id, str(exc)),
                            reason=str(exc))
        perms = permissions(verified.identity, verified.user_key, self.membership)
        expires = int(t + self.session_s)
        if verified.expires:
            expires = min(expires, verified.expires)
        user_claims: dict[str, Any] = {
            "sub": user_nkey, "aud": APP_ACCOUNT, "name": verified.identity.name,
            "exp": expires, "nats": {**perms.claims(), "type": "user", "version": 2}}
        user_jwt = encode_jwt(user_claims, self.issuer_seed, now=t)
        body = {"sub": user_nkey, "aud": server_id,
                "nats": {"jwt": user_jwt, "type": "authorization_response", "version": 2}}
        conn = Connection(server_id=server_id, client_id=int(client.get("id", 0)),
                          identity=verified.identity, user_key=verified.user_key,
                          jti=verified.jti, site_jti=verified.site_jti, permissions=perms,
                          studies=tuple(studies_of(verified.identity, self.membership)),
                          user_nkey=user_nkey, expires=expires,
                          renewable=not verified.expires or verified.expires > expires)
        return Decision(response=encode_jwt(body, self.issuer_seed, now=t), connection=conn)

    def _verify(self, nats: Mapping[str, Any], now: float) -> Verified:
        opts: dict[str, Any] = dict(nats.get("connect_opts") or {})
        token = str(opts.get("auth_token") or "")
        if not token:
            raise CredentialError("no Cairn credential (connect with a .creds file)")
        verified = verify_credential(token, self.roots, now=now)
        nonce = str((nats.get("client_info") or {}).get("nonce", ""))
        sig = str(opts.get("sig") or "")
        if not nonce or not sig or not verify(verified.user_key, nonce.encode(),
                                              decode_b64_any(sig)):
            raise CredentialError("the connection did not prove it holds the credential's key")
        self.check_standing(verified)
        return verified

    def check_standing(self, verified: Verified) -> None:
        """Raise unless the identity is still in good standing (not revoked, job running)."""
        identity = verified.identity
        if verified.jti in self.revoked_jtis or verified.site_jti in self.revoked_jtis:
            raise CredentialError("the credential has been revoked")
        if identity.name in self.revoked_names or \
                (identity.site and identity.site in self.revoked_names):
            raise CredentialError(f"{identity.name} has been revoked")
        if identity.kind is Kind.WORKER and (identity.study, identity.job) in self.ended_jobs:
            raise CredentialError(f"job {identity.job} has ended; its workers are cut off")

    def still_allowed(self, conn: Connection) -> bool:
        """Whether an admitted connection may stay as it is (else it is disconnected)."""
        verified = Verified(identity=conn.identity, user_key=conn.user_key, jti=conn.jti,
                            site_jti=conn.site_jti)
        try:
            self.check_standing(verified)
        except CredentialError:
            return False
        now = permissions(conn.identity, conn.user_key, self.membership)
        return now == conn.permissions

    def _refuse(self, user_nkey: str, server_id: str, reason: str) -> str:
        body = {"sub": user_nkey, "aud": server_id,
                "nats": {"error": reason, "type": "authorization_response", "version": 2}}
        return encode_jwt(body, self.issuer_seed)
