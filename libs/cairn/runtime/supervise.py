"""`cairn up` looks after its own federation: a parent, the nats-server or a site's leaf node
(`--leaf-sites`) that dies is started again, with backoff, and a line saying so.

Parents are restarted with the command they were started with, so a restarted launcher
reattaches to the workers that outlived it (they run in their own sessions) and a restarted
coordinator rebuilds its view from the streams. The nats-server comes back on the same port
and store: every client, workers included, reconnects to the URL it already has. So does a
site's leaf node, on its own ports and config: the site's parent reconnects to it, and it
dials the federation again. The leaf interest anchors (`cairn.runtime.leafanchor`) are a
parent like any other.

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
from cairn.runtime.natsserver import NatsServer
from cairn.runtime.watchdog import Watchdog

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
    watchdog: Watchdog | None = None
    """Finds parents alive but answering no health ping (`cairn.runtime.watchdog`); None:
    only deaths are noticed."""
    restarts: dict[str, int] = field(default_factory=dict)
    """Name -> restarts so far (`nats-server` for the bus, `nats-server-<i>` for a
    cluster's members, `leaf-<site>` for a site's leaf node), for reports and tests."""
    _watches: dict[str, _Watch] = field(default_factory=dict)
    _linking: dict[str, float] = field(default_factory=dict)
    """Leaf name -> when it was restarted, until it holds its link to the federation."""

    def check(self) -> None:
        """One pass: notice deaths, schedule restarts, carry out those that are due."""
        self._check_nats()
        self._check_leaves()
        self._check_hung()
        for p in list(self.fed.processes):
            self._check_parent(p.name)
        self._check_rejoin()

    def _check_hung(self) -> None:
        """A parent that stopped answering is killed here, and restarted below as any parent
        that died (not while the bus itself is coming back: nothing answers then)."""
        if self.watchdog is None or self._rejoin_since is not None:
            return
        for name in self.watchdog.hung():
            p = self.fed.process(name)
            self.say(f"{name} (pid {p.proc.pid}) answers no health ping for "
                     f"{self.watchdog.hang_s:g}s: killing it, to be restarted")
            self.fed.kill(name)

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
        members = self.fed.nats_members()
        for index, nats in enumerate(members):
            # A cluster's members are watched apart: one restarted member rejoins the
            # others, which kept serving (and the services connected to them) meanwhile.
            name = "nats-server" if len(members) == 1 else f"nats-server-{index}"
            self._check_server(name, index, nats)

    def _check_server(self, name: str, index: int, nats: NatsServer) -> None:
        watch = self._watch(name)
        proc = nats.proc
        if watch.due_at is None:
            if proc is not None and proc.poll() is None:
                return
            code = None if proc is None else proc.returncode
            delay = self._delay(watch)
            watch.due_at = self.clock() + delay
            self.say(f"{name} exited with {code}; restarting it on port {nats.port} "
                     f"(same store) in {delay:g}s")
            return
        if self.clock() < watch.due_at:
            return
        try:
            self.fed.restart_nats(index)
        except CairnError as exc:
            watch.restarts_in_a_row += 1
            watch.due_at = self.clock() + self._delay(watch)
            self.say(f"{name} did not come back: {exc}; trying again")
            return
        self._started(name, watch)
        self.say(f"{name} restarted on {nats.url} (pid {nats.proc.pid if nats.proc else '?'})")
        if self.fed.cluster is not None:
            return  # the others served throughout: every client is still connected
        # Every parent reconnects on its own (or exits 7 and is restarted below); until each
        # answers again, commands in the operator's other terminal are told "nothing
        # answers". `_check_rejoin` says when they do.
        self._rejoin_since = self.clock()

    def _check_leaves(self) -> None:
        """A site's leaf node (`cairn up --leaf-sites`) comes back on its own ports and
        config; the line after says when it has reached the federation again."""
        from cairn.runtime._leafsites import restart_leaf

        for site, leaf in self.fed.leaves.items():
            name = f"leaf-{site}"
            if leaf.server is None:
                continue  # stopped on purpose
            since = self._linking.get(name)
            if since is not None and leaf.linked():
                del self._linking[name]
                self.say(f"{name} reached the federation again "
                         f"({self.clock() - since:.1f}s after its restart)")
            watch = self._watch(name)
            proc = leaf.server.proc
            if watch.due_at is None:
                if proc is not None and proc.poll() is None:
                    continue
                delay = self._delay(watch)
                watch.due_at = self.clock() + delay
                self.say(f"{name} exited with {None if proc is None else proc.returncode}; "
                         f"restarting it on port {leaf.port} (same config) in {delay:g}s")
                continue
            if self.clock() < watch.due_at:
                continue
            try:
                restart_leaf(self.fed, site)
            except CairnError as exc:
                watch.restarts_in_a_row += 1
                watch.due_at = self.clock() + self._delay(watch)
                self.say(f"{name} did not come back: {exc}; trying again")
                continue
            self._started(name, watch)
            self._linking[name] = self.clock()
            pid = leaf.server.proc.pid if leaf.server.proc else "?"
            self.say(f"{name} restarted on {leaf.url} (pid {pid})")

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
