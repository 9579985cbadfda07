"""An embedded federation on one machine: a private nats-server, a coordinator, and a hub and
sites each run by one `cairn run agent launcher` process. For demos, development and tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.runtime import context, phases, secure
from cairn.runtime._fedfiles import DEFAULT_ADMIN, DEFAULT_STUDY, FederationFiles
from cairn.runtime._fedprocs import FederationProcesses, Process
from cairn.runtime.dirlock import DirLock
from cairn.runtime.forked import ForkedProcess, fork_authority, preload
from cairn.runtime.natsserver import NatsServer, free_port
from cairn.runtime.secure import Trust

if TYPE_CHECKING:
    from cairn.bus import Bus
    from cairn.runtime._cluster import NatsCluster
    from cairn.runtime.leaf import LeafNode

__all__ = ["DEFAULT_ADMIN", "DEFAULT_SITES", "DEFAULT_STUDY", "FEDERATION_SERVICES",
           "SITE_SERVICES", "EmbeddedFederation", "Process", "api_installed"]

DEFAULT_SITES = ("hub", "site-a", "site-b")
SITE_SERVICES = ("agent", "launcher", "snapshotter")
FEDERATION_SERVICES = ("coordinator", "validator", "signer")


def api_installed() -> bool:
    """Whether the HTTP API's dependencies (the `api` extra) are installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("litestar", "uvicorn"))


@dataclass
class EmbeddedFederation(FederationFiles, FederationProcesses):
    """Files (`cairn.runtime._fedfiles`) and processes (`cairn.runtime._fedprocs`) of one
    embedded federation under `dir`."""

    dir: Path
    sites: tuple[str, ...] = DEFAULT_SITES
    study: str = DEFAULT_STUDY
    port: int = 0
    heartbeat_s: float = 0.5
    extra_env: dict[str, str] = field(default_factory=dict)
    site_options: dict[str, str] = field(default_factory=dict)
    """`-O key=value` options for every site process (agent, launcher, snapshotter)."""
    hub_options: dict[str, str] = field(default_factory=dict)
    """`-O key=value` options for the hub's parent only (the coordinator's, e.g.)."""
    backends: dict[str, str] = field(default_factory=dict)
    """Site -> launcher backend in its site.yaml; `process` for every site not named."""
    site_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Site -> more site.yaml keys (a backend's section, e.g. `slurm: {driver: rest, ...}`)."""
    nats: NatsServer | None = None
    processes: list[Process] = field(default_factory=list)
    secure: bool = True
    """TLS, provisioned identities and the authority (see `cairn.runtime.secure`); False
    only for `cairn up --insecure`."""
    trust: Trust | None = None
    sites_per_process: int = 1
    """Sites but the hub served by one parent process (`cairn.runtime.sites`); 1: one
    `cairn run` parent per site, as `cairn up` runs them."""
    site_services: tuple[str, ...] = SITE_SERVICES
    """The services of every site but the hub (`cairn sim`: agent and launcher only)."""
    api: bool = False
    """Run the HTTP API and dashboard (`cairn.httpapi`) in the hub's parent; `cairn up` does
    when it is installed (the `api` extra). Off in tests that do not read it."""
    api_port: int = 0
    """The API's port (0: a free one, chosen at start)."""
    cluster_size: int = 1
    """nats-servers routed into one cluster (`cairn.runtime._cluster`); 1: one server."""
    cluster: NatsCluster | None = None
    """The cluster when `cluster_size` > 1 (`nats` is then its first member)."""
    leaf_sites: bool = False
    """A leaf node per site but the hub, its parent connected to it (`cairn.runtime.leaf`)."""
    leaf_port: int = 0
    """The server's leafnode port (0: a free one, chosen at start)."""
    leaf_uplinks: dict[str, str] = field(default_factory=dict)
    """Site -> where its leaf dials, where not the server's leafnode port (e.g. a proxy)."""
    leaves: dict[str, LeafNode] = field(default_factory=dict)
    standby: bool = False
    """Also run a standby parent with the coordinator, validator and signer, each waiting
    behind its lease to take over from the hub's (`cairn.runtime.standby`)."""
    _fork: bool = field(default=False, repr=False)
    _lock: DirLock | None = field(default=None, repr=False)
    _zygotes: dict[str, socket.socket] = field(default_factory=dict, repr=False)
    """Site -> this process's end of the socket to the zygote forked for it, until its
    parent is forked with it."""
    zygotes: dict[str, ForkedProcess] = field(default_factory=dict)
    """Site -> the warm interpreter forked for its launcher (`cairn up`'s own children)."""

    # -- processes ------------------------------------------------------------------------

    def start(self, *, fork: bool = False) -> None:
        """Start nats-server and the parents. `fork=True` forks them from this process
        after importing them once (see `cairn.runtime.forked`: only without a running event
        loop).

        Raises:
            Conflict: another federation runs in `dir` (see `cairn.runtime.dirlock`); nothing
                there was touched.
        """
        self._lock = DirLock.acquire(self.dir)
        try:
            self._start(fork)
        except BaseException:
            self.stop()  # a start that failed half way leaves nothing running, nor the lock
            raise

    def _start(self, fork: bool) -> None:
        phases.mark("up.start")
        self._fork = fork
        api_early = fork and self._start_api_early()
        if fork:
            # What a worker imports first, and the warm interpreters forked with it before any
            # secret is read here: what a zygote holds, its workers hold.
            preload((), zygote=True)
            phases.mark("up.worker_preloaded")
            self._fork_zygotes()
        servers: NatsServer | NatsCluster
        if self.cluster_size > 1:
            from cairn.runtime._cluster import NatsCluster

            self.cluster = NatsCluster.of(self)
            self.nats = self.cluster.members[0]
        elif self.nats is None:
            self.nats = NatsServer(self.dir / "nats", port=self.port)
        servers = self.cluster or self.nats
        if self.secure:
            urls = self.cluster.url if self.cluster else f"tls://{self.nats.host}:{self.nats.port}"
            self.write_files(urls)
            self.trust = secure.prepare(self.nats, self.federation_file, self.dir / "trust",
                                        url=urls)
            if self.cluster is not None:
                self.cluster.configure(self.trust.dir)
            phases.mark("up.provisioned")
            if self.api and not api_early:
                self._spawn_api()  # its imports (Litestar) beside the rest of the start
        if self.leaf_sites:
            from cairn.runtime._leafsites import prepare_leaves

            prepare_leaves(self)
        # The server, then at once the authority (it retries until the server listens):
        # each starts while the other does.
        servers.start(wait=False)
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        if self.trust is not None:
            log = logs / "authority.log"
            (self.trust.authority / "ready").unlink(missing_ok=True)  # a killed one's
            args = secure.authority_args(self.trust, self.nats_url, self.federation_file,
                                         servers=self.cluster_size)
            if fork:
                preload((), authority=True)
            proc: subprocess.Popen[bytes] | ForkedProcess = (
                fork_authority(args, self._env(), log, close=list(self._zygotes.values()))
                if fork else secure.spawn_authority(args, self._env(), log))
            self.processes.append(Process("authority", self.hub, (), proc, log))
            phases.mark("up.authority_started")
        if fork:
            # The parents' imports, while the server and the authority start beside them.
            preload(("coordinator", "validator", "signer", *SITE_SERVICES,
                     *(("httpapi",) if self.api else ())))
            phases.mark("up.preloaded")
        servers.wait_ready()
        phases.mark("up.nats_ready")
        self.record()
        url = self.nats_url
        self.write_files(url)
        if self.trust is not None:
            secure.wait_authority(self.trust, self.processes[-1].proc, log)
            phases.mark("up.authority_ready")
            if self.standby:  # started once the active one holds its lease
                standby_log = logs / "authority-standby.log"
                self.processes.append(Process(
                    "authority-standby", self.hub, (), secure.spawn_authority(
                        args, self._env(), standby_log), standby_log))
        if self.leaves:
            from cairn.runtime._leafsites import start_leaves

            start_leaves(self)
        options = [a for k, v in self.site_options.items() for a in ("-O", f"{k}={v}")]
        hub_only = [a for k, v in self.hub_options.items() for a in ("-O", f"{k}={v}")]
        # The hub's own parent also runs the federation's coordinator, validator and signer
        # (each once per federation): on a small machine every interpreter started costs its
        # imports, and `cairn run` runs several services in one process for this.
        evidence = ["-O", f"evidence_key={self.evidence_key}",
                    "-O", f"evidence_trust={self.trust_file}"]
        federation_options = list(evidence)
        hub_services: tuple[str, ...] = ("coordinator", "validator", "signer", *SITE_SERVICES)
        if self.api and self.trust is None:
            hub_services += ("httpapi",)  # insecure: no identity of its own to run under
            evidence += self._api_options()
        self._spawn("coordinator", self.hub, hub_services,
                    ["--federation", str(self.federation_file), *evidence,
                     "--site-config", str(self.site_config(self.hub)), *options, *hub_only])
        if self.standby:
            self._spawn("standby", self.hub, FEDERATION_SERVICES,
                        ["--federation", str(self.federation_file), *federation_options,
                         *hub_only])
        if self.sites_per_process > 1:
            self._spawn_grouped()
        else:
            for site in self.sites[1:]:
                self._spawn(f"site-{site}", site, self.site_services,
                            ["--site-config", str(self.site_config(site)), *options])
        phases.mark("up.parents_started")
        self.record()

    def _start_api_early(self) -> bool:
        """Fork the HTTP API's parent first, where this folder was provisioned before for
        this very federation (`secure.provisioned`): nothing is provisioned now, and the API
        builds its application (Litestar's import and routes, the largest start of any
        parent) while this process imports and forks the rest. Whether it did."""
        if not (self.secure and self.api and self.cluster_size == 1 and not self.leaf_sites
                and self.federation_file.exists() and self.trust_file.exists()):
            return False
        self.nats = NatsServer(self.dir / "nats", port=self.port)
        url = f"tls://{self.nats.host}:{self.nats.port}"
        if not secure.provisioned(self.nats, self.federation_file, self.dir / "trust", url=url):
            return False
        # What `secure.prepare` settles; it still runs (the server's config) after this.
        self.nats.config_file = self.dir / "trust" / "server" / "nats.conf"
        self.trust = Trust(self.dir / "trust")
        self._spawn_api()
        return True

    def _spawn_api(self) -> None:
        """The HTTP API's own parent, under its own narrow identity (`Role.API`): what the
        HTTP layer holds, should it be broken into, reads and writes nothing it needs not."""
        if self.trust is None:
            return  # insecure: the hub's parent runs it (no identity of its own to run under)
        from cairn.trust.credentials import API_NAME

        self._spawn("api", self.hub, ("httpapi",),
                    [*self._api_options(), "-O", f"evidence_trust={self.trust_file}"],
                    kit=API_NAME)

    def _spawn_grouped(self) -> None:
        """Parents that serve `sites_per_process` sites each (`cairn.runtime._parents`)."""
        from cairn.runtime._parents import spawn_grouped

        spawn_grouped(self)

    def _fork_zygotes(self) -> None:
        """A warm interpreter per process launcher, forked now (`cairn.runtime._parents`)."""
        from cairn.runtime._parents import fork_zygotes

        fork_zygotes(self)

    def _api_options(self) -> list[str]:
        """`-O` options of the hub's HTTP API: its port, and HTTPS with the server's own
        certificate when the federation is secure."""
        assert self.nats is not None
        if not self.api_port:
            self.api_port = free_port(self.nats.host)
        out = ["-O", f"listen={self.nats.host}:{self.api_port}"]
        if self.trust is not None:
            server = self.trust.dir / "server"
            out += ["-O", f"tls_cert={server / 'server.pem'}",
                    "-O", f"tls_key={server / 'server.key'}",
                    # Mutual TLS with the kits' client certificates, and revocation.
                    "-O", f"client_ca={self.trust.ca}",
                    "-O", f"revoked={self.trust.authority / 'revoked.json'}"]
        return out

    @property
    def api_url(self) -> str | None:
        """The HTTP API's URL (None when it does not run)."""
        if not self.api or not self.api_port or self.nats is None:
            return None
        scheme = "https" if self.trust is not None else "http"
        return f"{scheme}://{self.nats.host}:{self.api_port}"

    async def wait_healthy(self, timeout: float = 30.0,
                           progress: Callable[[int, int], None] | None = None) -> float:
        """Ping every service's health subject until all say ready; returns seconds taken.
        `progress(ready, total)` is called whenever more have answered."""
        from cairn.runtime.health import wait_healthy

        return await wait_healthy(self, timeout, progress)

    def client_options(self, actor: str = DEFAULT_ADMIN) -> dict[str, str]:
        """`creds` and `tls_ca` of a context for `actor` (its own kit, else the project
        admin's); empty for an insecure federation."""
        if self.trust is None:
            return {}
        if not self.trust.kit(actor).exists() and "@" in actor:
            # An admin added to a study at run time: give it a credential of its own (this
            # federation's root is at hand), so what it signs is its own.
            from cairn.trust.provision import admin_kit

            assert self.nats is not None
            admin_kit(self.trust.dir, actor, org=actor.split("@", 1)[1], url=self.nats_url,
                      federation="local")
        kit = actor if self.trust.kit(actor).exists() else DEFAULT_ADMIN
        return {"creds": str(self.trust.creds(kit)), "tls_ca": str(self.trust.ca)}

    def client_env(self, actor: str = DEFAULT_ADMIN) -> dict[str, str]:
        """`CAIRN_CREDS` and `CAIRN_TLS_CA` for a `cairn` command run as `actor`."""
        opts = self.client_options(actor)
        return {"CAIRN_CREDS": opts["creds"], "CAIRN_TLS_CA": opts["tls_ca"]} if opts else {}

    async def bus(self, name: str = "cairn-test", *, kit: str | None = None) -> Bus:
        """A connection as the hub (trusted with the federation's own subjects), or as the
        identity of `kit` (a site or admin): for tools and tests."""
        from cairn.bus import Bus

        assert self.nats is not None
        creds = str(self.trust.creds(kit or self.hub)) if self.trust else None
        tls = context.tls_context(str(self.trust.ca), None, None) if self.trust else None
        return await Bus.connect(self.nats_url, name=name, creds=creds, tls=tls)

    def write_context(self, path: Path | None = None) -> Path:
        assert self.nats is not None
        ctx = context.Context(nats_url=self.nats_url, federation="local", study=self.study,
                              actor=DEFAULT_ADMIN, **self.client_options(),
                              dir=str(self.dir.resolve()),
                              up_pid=os.getpid(), hub=self.hub, sites=list(self.sites),
                              api_url=self.api_url)
        return context.save(ctx, path)

