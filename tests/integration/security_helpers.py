"""A hostile client for the security tests: plain nats-py with whatever credential it has,
recording what the server refuses (refusals arrive in error_cb, not as exceptions)."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

from cairn.runtime.embedded import EmbeddedFederation
from cairn.trust.connect import creds_options


@dataclass
class Probe:
    nc: NATS
    errors: list[str] = field(default_factory=list)
    received: list[str] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def refused(self, what: str) -> bool:
        # nats-py lowercases the subject in the message it passes on.
        return any("permissions violation" in e.lower() and what.lower() in e.lower()
                   for e in self.errors)

    async def settled(self, timeout: float = 5.0) -> None:
        """Return once the server has answered everything sent so far, refusals included.

        The server sends a refusal before the PONG of a later PING, and nats-py hands it to
        `error_cb` before it reads on. But a flush writes its PING ahead of publishes still
        pending in nats-py's buffer: only the second flush's PONG comes after those.
        """
        await self.nc.flush(timeout=timeout)
        await self.nc.flush(timeout=timeout)

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.close()


def ca_context(fed: EmbeddedFederation) -> ssl.SSLContext:
    assert fed.trust is not None
    return ssl.create_default_context(cafile=str(fed.trust.ca))


async def connect_as(fed: EmbeddedFederation, creds: Path | None, *,
                     reconnect: bool = False) -> Probe:
    """Connect with a credentials file (or none); raises what nats-py raises on refusal."""
    assert fed.nats is not None
    probe: Probe

    async def on_error(exc: Exception) -> None:
        probe.errors.append(str(exc))

    async def on_closed() -> None:
        probe.closed.set()

    options: dict[str, Any] = creds_options(str(creds)) if creds else {}
    nc = await nats.connect(fed.nats.url, tls=ca_context(fed), error_cb=on_error,
                            closed_cb=on_closed, allow_reconnect=reconnect,
                            max_reconnect_attempts=3 if reconnect else 0,
                            reconnect_time_wait=0.2, connect_timeout=3, **options)
    probe = Probe(nc)
    return probe


async def refused_at_connect(fed: EmbeddedFederation, creds: Path | None) -> str:
    """The error a connection attempt ends with (fails the test if it connects)."""
    try:
        probe = await connect_as(fed, creds)
    except Exception as exc:  # nats-py raises its own error types for an auth refusal
        return str(exc) or type(exc).__name__
    await probe.close()
    raise AssertionError(f"{creds} connected, but should have been refused")
