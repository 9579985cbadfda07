"""The processes of an embedded federation (`cairn.runtime.embedded`): spawning, forking,
killing and respawning its parents, recording them in the folder's lock, and the stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.runtime import secure
from cairn.runtime.dirlock import DirLock, Started, started
from cairn.runtime.forked import ZYGOTE_FD_ENV, ForkedProcess, fork_service
from cairn.runtime.natsserver import NatsServer
from cairn.runtime.secure import Trust

if TYPE_CHECKING:
    from cairn.runtime._cluster import NatsCluster
    from cairn.runtime.leaf import LeafNode


@dataclass
class Process:
    name: str
    site: str
    services: tuple[str, ...]
    proc: subprocess.Popen[bytes] | ForkedProcess
    log: Path
    more_sites: tuple[str, ...] = ()
    """Further sites this process serves (`cairn.runtime.sites`), after `site`."""


class FederationProcesses:
    """An embedded federation's servers and parents (a mixin of `EmbeddedFederation`, whose
    fields these are)."""

    dir: Path
    heartbeat_s: float
    extra_env: dict[str, str]
    nats: NatsServer | None
    cluster: NatsCluster | None
    processes: list[Process]
    trust: Trust | None
    leaves: dict[str, LeafNode]
    zygotes: dict[str, ForkedProcess]
    _fork: bool
    _lock: DirLock | None
    _zygotes: dict[str, socket.socket]

    @property
    def nats_url(self) -> str:
        """The URL clients are given: every server of a cluster, comma-separated."""
        if self.cluster is not None:
            return self.cluster.url
        assert self.nats is not None
        return self.nats.url

    def nats_members(self) -> list[NatsServer]:
        """Every nats-server this federation runs."""
        if self.cluster is not None:
            return list(self.cluster.members)
        return [self.nats] if self.nats is not None else []

    def record(self) -> None:
        """Write down in the directory's lock what runs now (after a start or a restart), so
        that what outlives this process is known to the next `cairn up` and `cairn down`."""
        if self._lock is None:
            return
        running: list[Started] = []
        running += [started("nats-server", m.proc.pid) for m in self.nats_members()
                    if m.proc is not None]
        running += [started(p.name, p.proc.pid) for p in self.processes]
        running += [started(f"leaf-{s}", leaf.server.proc.pid) for s, leaf in self.leaves.items()
                    if leaf.server is not None and leaf.server.proc is not None]
        self._lock.record(running, url=self.nats_url if self.nats else None)

    def restart_nats(self, member: int = 0) -> None:
        """Start the nats-server (a cluster's `member`) again on the same ports, config
        and store."""
        self.nats_members()[member].restart()
        self.record()

    def _spawn(self, name: str, site: str, services: tuple[str, ...], args: list[str], *,
               kit: str | None = None) -> None:
        assert self.nats is not None
        log = self.dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = self._env()
        if self.trust is not None:
            args = [*args, *secure.service_args(self.trust, kit or site)]
        if site in self.leaves:
            from cairn.runtime._leafsites import leaf_env

            args = [*args, "--nats-url", self.leaves[site].url]
            env.update(leaf_env())
        cmd = [sys.executable, "-m", "cairn.runtime._serve", *services, "--site", site,
               "--heartbeat", str(self.heartbeat_s), *args]
        if self._fork:
            # The site's warm interpreter goes to the parent that runs its launcher.
            sock = self._zygotes.pop(site, None) if "launcher" in services else None
            if sock is not None:
                env[ZYGOTE_FD_ENV] = str(sock.fileno())
            others = list(self._zygotes.values())
            try:
                forked = fork_service(services, cmd[3 + len(services):], env, log,
                                      close=others)
            finally:
                if sock is not None:
                    sock.close()  # the parent's alone now: its end of file ends the zygote
            self.processes.append(Process(name, site, services, forked, log))
            return
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.processes.append(Process(name, site, services, proc, log))

    def _env(self) -> dict[str, str]:
        assert self.nats is not None
        env = {**os.environ, "CAIRN_NATS_URL": self.nats_url, "PYTHONUNBUFFERED": "1",
               **self.extra_env}
        if self.cluster is not None:
            env = {**self.cluster.env(), **env}  # the cluster's replicas, unless set
        env.pop("CAIRN_CONTEXT", None)
        return env

    def process(self, name: str) -> Process:
        for p in self.processes:
            if p.name == name:
                return p
        raise KeyError(name)

    def kill(self, name: str) -> None:
        """SIGKILL one parent process (as a crash would); its workers live on."""
        p = self.process(name)
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(5)

    def respawn(self, name: str) -> None:
        """Start a killed parent process again with the same command."""
        p = self.process(name)
        self.processes.remove(p)
        args = p.proc.args  # a forked one's: the command that starts it afresh
        assert isinstance(args, list)
        with open(p.log, "ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self._env(),
                                    start_new_session=True)
        self.processes.append(Process(p.name, p.site, p.services, proc, p.log, p.more_sites))
        self.record()

    def expected(self) -> list[tuple[str, str]]:
        return [(svc, site) for p in self.processes for site in (p.site, *p.more_sites)
                for svc in p.services]

    def stop(self, timeout: float = 15.0) -> None:
        for p in self.processes:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in self.processes:
            try:
                p.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait(5)
        self.processes.clear()
        for sock in self._zygotes.values():
            sock.close()
        self._zygotes.clear()
        for zygote in self.zygotes.values():  # they end with their parents' end of file
            try:
                zygote.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                zygote.kill()
                zygote.wait(5)
        self.zygotes.clear()
        for leaf in self.leaves.values():
            leaf.stop()
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None
        if self.nats is not None:
            self.nats.stop()
            self.nats = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
