"""A hostile client for the security tests: plain nats-py with whatever credential it has,
recording what the server refuses (refusals arrive in error_cb, not as exceptions)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client as NATS

from cairn.bus import Bus
from cairn.events import LaunchRequested
from cairn.runtime.embedded import EmbeddedFederation
from cairn.trust.connect import creds_options


@dataclass
class Probe:
    nc: NATS
    errors: list[str] = field(default_factory=list)
    received: list[str] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def refused(self, what: str) -> bool:
        # nats-py lowercases the subject in the message it passes on.
        return any("permissions violation" in e.lower() and what.lower() in e.lower()
                   for e in self.errors)

    async def wait_refused(self, what: str, timeout: float = 10.0) -> bool:
        """Whether the server refuses `what` (e.g. 'publish to "x"'), waiting for its answer.

        A refusal can reach the client after the answer to a flush sent behind it, so a
        flush alone proves nothing: the refusal itself is the event waited for.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.refused(what):
            left = deadline - loop.time()
            if left <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except TimeoutError:
                return self.refused(what)
        return True

    async def wait_errors(self, count: int, timeout: float = 10.0) -> None:
        """Wait until at least `count` refusals arrived (or `timeout`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.errors) < count and (left := deadline - loop.time()) > 0:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except TimeoutError:
                return

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
        probe.changed.set()

    async def on_closed() -> None:
        probe.closed.set()

    options: dict[str, Any] = creds_options(str(creds)) if creds else {}
    nc = NATS()
    try:
        await nc.connect(fed.nats.url, tls=ca_context(fed), error_cb=on_error,
                         closed_cb=on_closed, allow_reconnect=reconnect,
                         max_reconnect_attempts=3 if reconnect else 0,
                         reconnect_time_wait=0.2, connect_timeout=3, **options)
    except BaseException:
        # nats-py leaves a refused client's socket open: closed here, not by the collector.
        with contextlib.suppress(Exception):
            await nc.close()
        raise
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


async def js_allowed(probe: Probe, subject: str, payload: bytes = b"",
                     timeout: float = 10.0) -> bool:
    """Ask a JetStream API (or store into a stream): True when the server answers, False
    when it refuses the publish. Both are events, so neither verdict rests on a wait."""
    answer = asyncio.ensure_future(probe.nc.request(subject, payload, timeout=timeout))
    refusal = asyncio.ensure_future(probe.wait_refused(f'publish to "{subject}"', timeout))
    done, _ = await asyncio.wait({answer, refusal}, return_when=asyncio.FIRST_COMPLETED)
    if refusal in done and refusal.result():
        answer.cancel()
        return False
    refusal.cancel()
    try:
        await answer
    except Exception:
        return False
    return True


class Watch:
    """Messages on one subject, as the hub sees them, from before the test acts (no polling:
    a test waits on the message that proves what it asserts)."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self._arrived = asyncio.Event()

    async def on_msg(self, msg: Any) -> None:
        self.seen.append(bytes(msg.data))
        self._arrived.set()

    async def first(self, timeout: float = 30.0) -> bytes:
        async with asyncio.timeout(timeout):
            while not self.seen:
                self._arrived.clear()
                await self._arrived.wait()
        return self.seen[0]


async def watch(bus: Bus, subject: str) -> Watch:
    """Start watching `subject` (core subscription, flushed: nothing after this is missed)."""
    watching = Watch()
    await bus.subscribe_core(subject, watching.on_msg)
    await bus.nc.flush(timeout=5)
    return watching


def forged_launch(job: str, marker: Path, **changes: object) -> LaunchRequested:
    """A launch at site-a, as site-a's own identity may write one, of a job no deploy command
    asked for: its entrypoint touches `marker`, so running it shows."""
    fields: dict[str, object] = {
        "id": f"forged-{job}", "at": "2026-01-01T00:00:00Z", "study": "demo",
        "source": "agent@site-a", "launch_id": f"{job}/site-a/client/0/0", "job": job,
        "site": "site-a", "role": "client", "entrypoint": f"touch {marker}"}
    fields.update(changes)
    return msgspec.convert(fields, LaunchRequested)
