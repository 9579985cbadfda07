"""The HTTP API service: folds the streams it shows, then serves HTTP(S) on `listen`.

Options (`-O key=value`): `listen` (host:port, default 127.0.0.1:8470), `tls_cert` and
`tls_key` (serve HTTPS; `cairn up` uses its server certificate), `client_ca` (with HTTPS:
accept client certificates this CA issued to Cairn identities, mutual TLS), `revoked` (the
authority's revocation file: a revoked identity's token or certificate is refused),
`catalog` (the recipe catalog), `evidence_trust` (the trust list recipes' evidence is
counted against). In a secure federation (`--creds`) tokens are checked against the kit's
`roots.txt`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from cairn.errors import InvalidInput, Unavailable
from cairn.httpapi.clientcert import Revocations, protocol_with_peer_cert
from cairn.httpapi.context import ApiContext
from cairn.httpapi.federation import FederationFacts
from cairn.httpapi.feeds import Feeds
from cairn.httpapi.recipes import RecipeCatalog
from cairn.trust.nkeyjwt import read_roots_file

if TYPE_CHECKING:
    import uvicorn
    from litestar import Litestar

    from cairn.runtime.service import Runtime, ServiceConfig

log = logging.getLogger("cairn.httpapi")
DEFAULT_LISTEN = "127.0.0.1:8470"


def parse_listen(value: str) -> tuple[str, int]:
    """`host:port` (port 0: any free one).

    Raises:
        InvalidInput: not host:port with a port in 0..65535.
    """
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidInput(f"listen must be HOST:PORT, not {value!r}", field="listen")
    return host.strip("[]"), int(port)


class HttpApiService:
    name: ClassVar[str] = "httpapi"

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.host, self.port = parse_listen(config.options.get("listen", DEFAULT_LISTEN))
        self._server: uvicorn.Server | None = None
        self._serving: asyncio.Task[None] | None = None
        self._ctx: ApiContext | None = None
        self._app: Litestar | None = None
        self._recipes: RecipeCatalog | None = None
        self._protocol: type[asyncio.Protocol] | Literal["auto"] = "auto"
        self.url = ""

    def prepare(self) -> None:
        """What the start needs that needs no bus, done before the runner connects: the
        Litestar application (its import and build are most of this service's start), the
        recipe catalog and uvicorn.

        Raises:
            InvalidInput: a malformed recipe catalog or trust list.
        """
        if self._app is not None:
            return
        import uvicorn  # noqa: F401 - imported now, not in start

        from cairn.httpapi.app import build_app

        opts = self.config.options
        self._recipes = RecipeCatalog.load(opts.get("catalog"), opts.get("evidence_trust"))
        self._protocol = _http_protocol(opts.get("client_ca"))
        self._app = build_app(self._context)

    def _context(self) -> ApiContext:
        assert self._ctx is not None, "a request before the API started"
        return self._ctx

    async def start(self, runtime: Runtime) -> None:
        import uvicorn

        self.prepare()
        opts = self.config.options
        roots = (read_roots_file(Path(self.config.creds).parent / "roots.txt")
                 if self.config.creds else None)
        feeds = Feeds(runtime.bus)
        facts = FederationFacts(runtime.bus)
        assert self._recipes is not None and self._app is not None
        await feeds.start()
        await facts.start()
        revoked = opts.get("revoked")
        self._ctx = ApiContext(bus=runtime.bus, feeds=feeds, facts=facts, recipes=self._recipes,
                               roots=roots,
                               revocations=Revocations(Path(revoked) if revoked else None))
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
        # and without it every keep-alive answer waits ~40 ms (Nagle and delayed ACKs).
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET,
                             socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise Unavailable(f"the HTTP API cannot listen on {self.host}:{self.port}: "
                              f"{exc.strerror or exc} (-O listen=HOST:PORT)",
                              field="listen") from None
        cert, key = opts.get("tls_cert"), opts.get("tls_key")
        client_ca = opts.get("client_ca")
        if client_ca and not cert:
            sock.close()
            raise InvalidInput("client_ca (mutual TLS) needs HTTPS: give tls_cert and tls_key",
                               field="client_ca")
        config = uvicorn.Config(self._app, log_level="warning", lifespan="off",
                                access_log=False, ssl_certfile=cert, ssl_keyfile=key,
                                timeout_graceful_shutdown=2, ssl_ca_certs=client_ca,
                                ssl_cert_reqs=ssl.CERT_OPTIONAL if client_ca else ssl.CERT_NONE,
                                http=self._protocol)
        self._server = _QuietServer(config)
        self._serving = asyncio.create_task(self._server.serve(sockets=[sock]),
                                            name="httpapi")
        port = sock.getsockname()[1]
        self.url = f"{'https' if cert else 'http'}://{self.host}:{port}"
        log.info("HTTP API at %s (%s%s)", self.url,
                 "tokens checked against the federation's roots" if roots else
                 "INSECURE: no tokens, every caller reads everything",
                 ", client certificates of its CA accepted" if client_ca else "")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._serving is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._serving, 5.0)
        if self._ctx is not None:
            await self._ctx.feeds.stop()
            await self._ctx.facts.stop()

    def ready(self) -> bool:
        return self._server is not None and self._server.started

    def health(self) -> dict[str, object]:
        return {"url": self.url}


def _http_protocol(client_ca: str | None) -> type[asyncio.Protocol] | Literal["auto"]:
    """uvicorn's HTTP protocol; with mutual TLS, one that hands the application the client
    certificate the handshake verified (`clientcert`). The certificate is optional: a
    token still works."""
    if not client_ca:
        return "auto"
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    return protocol_with_peer_cert(AutoHTTPProtocol)


class _QuietServer:
    """uvicorn's server without its signal handlers: the service runner owns SIGTERM."""

    def __new__(cls, config: uvicorn.Config) -> uvicorn.Server:  # type: ignore[misc]
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        return Server(config)
