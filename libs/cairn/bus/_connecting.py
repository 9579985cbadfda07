"""How a Bus connects: nats-py's callbacks (refusals told apart from an unreachable server,
what a reconnect or a close means for the Bus), a TCP probe, and a first connection that
ends as soon as the server refuses it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nats.aio.client import Client

from cairn.bus._reconnects import end_reconnecting
from cairn.errors import CairnError, PermissionDenied, Unavailable

if TYPE_CHECKING:
    from cairn.bus._connection import Bus

log = logging.getLogger("cairn.bus")


class Callbacks:
    """nats-py's callbacks for one connection to `servers`, before and after its Bus."""

    def __init__(self, servers: list[str], on_event: Callable[[str], None] | None) -> None:
        self.where = ", ".join(servers)
        self.on_event = on_event
        self.bus: Bus | None = None
        self.last_error = ""
        self.refused: list[CairnError] = []
        self.refusal = asyncio.Event()
        """Set when the server refused this connection's credential or certificate."""

    def options(self) -> dict[str, Any]:
        return {"disconnected_cb": self.disconnected, "reconnected_cb": self.reconnected,
                "error_cb": self.error, "closed_cb": self.closed}

    async def _note(self, kind: str) -> None:
        log.info("nats %s", kind)
        if self.on_event is not None:
            self.on_event(kind)

    async def disconnected(self) -> None:
        await self._note("disconnected")

    async def reconnected(self) -> None:
        await self._note("reconnected")
        if self.bus is not None:
            self.bus.awaiting_rights.clear()
            for listener in list(self.bus.reconnect_listeners):
                listener()

    async def closed(self) -> None:
        if self.bus is not None and not self.bus._closing:
            self.bus.lost_reason = self.last_error or "closed"
            self.bus.lost.set()

    async def error(self, exc: Exception) -> None:
        self.last_error = str(exc)
        text = str(exc).lower()
        if "authorization violation" in text:
            self.refused.append(PermissionDenied(
                f"NATS at {self.where} refused this connection ({exc}): a credential of this "
                "federation is needed (the context's creds, $CAIRN_CREDS or --creds), "
                "not revoked or expired"))
            self.refusal.set()
        elif "certificate verify failed" in text:
            self.refused.append(Unavailable(
                f"NATS at {self.where}: its certificate is not trusted ({exc}): give the "
                "federation CA (the context's tls_ca, $CAIRN_TLS_CA or --tls-ca)"))
            self.refusal.set()
        # The server refuses what an identity may not do without raising anywhere else.
        sub = re.search(r'subscription to "?([^"\s]+)', str(exc), re.IGNORECASE)
        if sub and self.bus is not None and sub.group(1).lower() in self.bus.awaiting_rights:
            log.info("the subscription to %s waits for this connection's renewed rights",
                     sub.group(1))
        elif "permissions violation" in text:
            log.warning("nats refused: %s", exc)
            if self.bus is not None:
                self.bus.refusals.append(str(exc).lower())
        else:
            log.debug("nats error: %s", exc)


async def connected_or_refused(client: Client, connecting: asyncio.Future[None],
                               refusal: asyncio.Event, timeout: float) -> Client | None:
    """`client` connected, or None once the server refused its authorization (nats-py would
    otherwise keep retrying a refused first connection until the timeout). A client that
    did not connect is closed, its socket with it: nats-py leaves it open when it gives up."""
    refused: asyncio.Future[Any] = asyncio.ensure_future(refusal.wait())
    waiting: set[asyncio.Future[Any]] = {connecting, refused}
    try:
        done, _ = await asyncio.wait(waiting, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        refused.cancel()
    if connecting in done and connecting.exception() is None:
        return client
    connecting.cancel()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.close(), 5.0)
    await end_reconnecting(client)
    if connecting in done:
        connecting.result()  # nats-py's own error, as `nats.connect` raised it
    if refusal.is_set():
        return None
    raise TimeoutError


async def probe(servers: list[str], timeout: float) -> None:
    """Raise OSError unless some server accepts a TCP connection."""
    from urllib.parse import urlsplit

    last: OSError = OSError("no servers")
    for server in servers:
        parts = urlsplit(server if "://" in server else f"nats://{server}")
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(parts.hostname or "127.0.0.1", parts.port or 4222),
                timeout)
        except (TimeoutError, OSError) as exc:
            last = exc if isinstance(exc, OSError) else OSError(f"{server}: timed out")
            continue
        writer.close()
        return
    raise last
