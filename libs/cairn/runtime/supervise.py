"""`cairn up` looks after its own federation: a parent or the nats-server that dies is started
again, with backoff, and a line saying so.

Parents are restarted with the command they were started with, so a restarted launcher
reattaches to the workers that outlived it (they run in their own sessions) and a restarted
coordinator rebuilds its view from the streams. The nats-server comes back on the same port
and store: every client, workers included, reconnects to the URL it already has.

The port is remembered in `<dir>/nats/port`, so `cairn up` on an existing `--dir` takes the
same one again and workers left running from an earlier run find their bus where it was.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cairn.errors import CairnError
from cairn.runtime.embedded import EmbeddedFederation

BACKOFF_S: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
"""Waits before the 1st, 2nd, ... restart in a row; the last repeats."""

STEADY_S = 60.0
"""A process that stayed up this long starts its backoff afresh when it dies again."""

PORT_FILE = "port"


def remembered_port(dir_: Path) -> int:
    """The NATS port an earlier `cairn up` in `dir_` used, or 0 (none, or now taken)."""
    try:
        port = int((dir_ / "nats" / PORT_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return 0
    if not 0 < port < 65536 or not _bindable(port):
        return 0
    return port


def remember_port(dir_: Path, port: int) -> None:
    path = dir_ / "nats" / PORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{port}\n", encoding="utf-8")


def _bindable(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


REJOIN_PING_S = 1.0
"""How long one pass's health round may take after a bus restart (the supervisor's loop waits
that long at most before it looks at its processes again)."""


@dataclass
class _Watch:
    """Restart bookkeeping for one supervised process."""

    restarts_in_a_row: int = 0
    started_at: float = field(default_factory=time.monotonic)
    due_at: float | None = None
    """When it is to be started again (None: running)."""


@dataclass
class Supervisor:
    """Restarts what died in `fed`; call `check()` every half second or so.

    Args:
        fed: A started federation.
        say: Where the lines for people go (`cairn up` prints them to stderr).
        backoff: See `BACKOFF_S`.
        clock: Monotonic seconds (a parameter so the backoff can be tested without waiting).
    """

    fed: EmbeddedFederation
    say: Callable[[str], None]
    backoff: Sequence[float] = BACKOFF_S
    steady_s: float = STEADY_S
    clock: Callable[[], float] = time.monotonic
    rejoin_s: float = 60.0
    """How long to wait, after the bus came back, for every service to answer again."""
    _rejoin_since: float | None = None
    """When the bus was restarted, while not every service answers again yet."""
    restarts: dict[str, int] = field(default_factory=dict)
    """Name -> restarts so far (`nats-server` for the bus), for reports and tests."""
    _watches: dict[str, _Watch] = field(default_factory=dict)

    def check(self) -> None:
        """One pass: notice deaths, schedule restarts, carry out those that are due."""
        self._check_nats()
        for p in list(self.fed.processes):
            self._check_parent(p.name)
        self._check_rejoin()

    def _check_rejoin(self) -> None:
        """After the bus came back: one short round of health pings per pass (a parent may
        still be reconnecting, or be restarted in between), until all answer or `rejoin_s`."""
        since = self._rejoin_since
        if since is None:
            return
        try:
            asyncio.run(self.fed.wait_healthy(REJOIN_PING_S))
        except CairnError as exc:
            if self.clock() - since >= self.rejoin_s:
                self._rejoin_since = None
                self.say(f"services did not all answer again within {self.rejoin_s:g}s "
                         f"of the bus's restart: {exc}")
            return
        self._rejoin_since = None
        self.say(f"every service answers again ({self.clock() - since:.1f}s after the "
                 "bus's restart)")

    def _watch(self, name: str) -> _Watch:
        return self._watches.setdefault(name, _Watch(started_at=self.clock()))

    def _delay(self, watch: _Watch) -> float:
        now = self.clock()
        if now - watch.started_at >= self.steady_s:
            watch.restarts_in_a_row = 0
        return self.backoff[min(watch.restarts_in_a_row, len(self.backoff) - 1)]

    def _check_nats(self) -> None:
        nats = self.fed.nats
        if nats is None:
            return
        watch = self._watch("nats-server")
        proc = nats.proc
        if watch.due_at is None:
            if proc is not None and proc.poll() is None:
                return
            code = None if proc is None else proc.returncode
            delay = self._delay(watch)
            watch.due_at = self.clock() + delay
            self.say(f"nats-server exited with {code}; restarting it on port {nats.port} "
                     f"(same store) in {delay:g}s")
            return
        if self.clock() < watch.due_at:
            return
        try:
            self.fed.restart_nats()
        except CairnError as exc:
            watch.restarts_in_a_row += 1
            watch.due_at = self.clock() + self._delay(watch)
            self.say(f"nats-server did not come back: {exc}; trying again")
            return
        self._started("nats-server", watch)
        self.say(f"nats-server restarted on {nats.url} (pid {nats.proc.pid if nats.proc else '?'})")
        # Every parent reconnects on its own (or exits 7 and is restarted below); until each
        # answers again, commands in the operator's other terminal are told "nothing
        # answers". `_check_rejoin` says when they do.
        self._rejoin_since = self.clock()

    def _check_parent(self, name: str) -> None:
        watch = self._watch(name)
        p = self.fed.process(name)
        if watch.due_at is None:
            if p.proc.poll() is None:
                return
            delay = self._delay(watch)
            watch.due_at = self.clock() + delay
            self.say(f"{name} (pid {p.proc.pid}) exited with {p.proc.returncode}; "
                     f"restarting it in {delay:g}s (log {p.log})")
            return
        if self.clock() < watch.due_at:
            return
        try:
            self.fed.respawn(name)
        except OSError as exc:
            watch.restarts_in_a_row += 1
            watch.due_at = self.clock() + self._delay(watch)
            self.say(f"{name} could not be started again: {exc}; trying again")
            return
        self._started(name, watch)
        self.say(f"{name} restarted (pid {self.fed.process(name).proc.pid})")

    def _started(self, name: str, watch: _Watch) -> None:
        watch.restarts_in_a_row += 1
        watch.started_at = self.clock()
        watch.due_at = None
        self.restarts[name] = self.restarts.get(name, 0) + 1
