"""What every request handler reads: the folds, the catalog, the bus and how callers are
verified."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn.errors import PermissionDenied
from cairn.httpapi.clientcert import Revocations, identity_of_cert
from cairn.httpapi.scope import Caller, caller_of
from cairn.trust import apitoken
from cairn.trust.permissions import Membership

if TYPE_CHECKING:
    # Only for types: building the application (and its OpenAPI document) imports no bus.
    from cairn.bus import Bus
    from cairn.httpapi.federation import FederationFacts
    from cairn.httpapi.feeds import Feeds
    from cairn.httpapi.recipes import RecipeCatalog


@dataclass
class ApiContext:
    bus: Bus
    feeds: Feeds
    facts: FederationFacts
    recipes: RecipeCatalog
    roots: frozenset[str] | None
    """The federation's roots, against which tokens are checked; None: insecure."""
    request_timeout_s: float = 10.0
    revocations: Revocations = field(default_factory=lambda: Revocations(None))
    """Who is refused though their token or certificate checks out (`-O revoked`)."""

    @property
    def secure(self) -> bool:
        return self.roots is not None

    def membership(self) -> dict[str, Membership]:
        out: dict[str, Membership] = {}
        for name in self.feeds.names():
            feed = self.feeds.get(name)
            if feed is not None and feed.study is not None:
                out[name] = Membership(sites=frozenset(feed.study.sites),
                                       admins=frozenset(feed.study.admins))
        return out

    def caller(self, authorization: str | None, client_cert: str | None = None) -> Caller:
        """The caller of a request: its `Authorization` header's bearer token, else the
        client certificate its TLS connection proved (mutual TLS, `clientcert`).

        Raises:
            PermissionDenied: neither (in a secure federation), or one that does not check
                out, or an identity since revoked (the message says why).
        """
        if self.roots is None:
            return Caller(identity=None)
        if not authorization and client_cert:
            verified = identity_of_cert(client_cert, self.roots)
            self.revocations.check(verified, "client-certificate")
            return caller_of(verified.identity, verified.user_key, self.membership())
        if not authorization:
            raise PermissionDenied("no token: send `Authorization: Bearer <token>` (mint one "
                                   "with `cairn api token`), or connect with your kit's "
                                   "client certificate", field="authorization")
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise PermissionDenied("the Authorization header must be `Bearer <token>`",
                                   field="authorization")
        verified = apitoken.check(token.strip(), self.roots)
        self.revocations.check(verified, "token")
        return caller_of(verified.identity, verified.user_key, self.membership())
