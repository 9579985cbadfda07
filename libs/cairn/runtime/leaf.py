"""Sites on leaf nodes: each site's own nats-server that dials out to the federation.

A leaf node is an ordinary nats-server with a `leafnodes.remotes` entry: it dials the
federation's leafnode port with the site's credential, so a site needs no inbound port. The
site's parent (agent, launcher, snapshotter) connects to its leaf on loopback. The federation
sees one connection per leaf, authorized by the authority like any of the site's own (auth
callout): what crosses the link is exactly what the site's identity may publish and read,
derived from the subject table, so a leaf of one study's site carries nothing of another.

The authority reads a credential from the CONNECT token (`cairn.trust.connect`), and a leaf
remote sends a token only as the user part of its URL: the remote's URL carries the
credential's JWT (not a secret: the seed that signs the server's nonce stays in the creds
file), so the config file is written for this user alone.

Through a link outage the leaf keeps serving its local clients; what they publish then is
kept by each writer's own spool and sent again, under its own identity, once the link is
back (`cairn.bus.spool`, and docs/scale.md, "Sites on leaf nodes", for why not sourcing).
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cairn.errors import Unavailable
from cairn.runtime.natsserver import NatsServer, free_port

LEAF_RECONNECT_S = 1
"""Seconds between a leaf's attempts to dial the federation again after losing it."""


def _q(value: str | Path) -> str:
    return json.dumps(str(value))


@dataclass(frozen=True)
class ServerTls:
    """The certificate a server presents and the CA it checks peers against."""

    cert: Path
    key: Path
    ca: Path

    def block(self) -> str:
        return (f"tls {{ cert_file: {_q(self.cert.resolve())}, key_file: "
                f"{_q(self.key.resolve())}, ca_file: {_q(self.ca.resolve())}, timeout: 5 }}")


def hub_leafnodes_block(host: str, port: int, tls: ServerTls | None) -> str:
    """The `leafnodes` section of the federation server's config: where leaves dial in.

    Leaf connections are authorized as clients are (the auth callout): no `authorization`
    here, so a leaf has the rights of the credential it dials with, and none without one."""
    inner = f"listen: {_q(f'{host}:{port}')}"
    if tls is not None:
        inner += f"\n  {tls.block()}"
    return ("\n# Sites' leaf nodes dial in here (cairn.runtime.leaf).\n"
            f"leafnodes {{\n  {inner}\n}}\n")


def remote_url(hub_url: str, token: str | None) -> str:
    """The leaf's remote URL: the hub's leafnode address, with the credential's JWT as its
    token where the federation is secure."""
    scheme, _, where = hub_url.partition("://")
    if token is None:
        return hub_url
    return f"{scheme}://{token}@{where}"


def render_leaf(*, site: str, host: str, port: int, monitor_port: int, hub_leaf_url: str,
                creds: Path | None, token: str | None, tls: ServerTls | None) -> str:
    """A site's leaf config: local clients on loopback (TLS when the federation is), and one
    remote that dials the federation, checking its certificate against the federation CA."""
    lines = [f"# A leaf node of site {site} (cairn.runtime.leaf). Regenerate rather than edit.",
             f"server_name: {_q(f'leaf-{site}')}",
             f"listen: {_q(f'{host}:{port}')}",
             f"http: {_q(f'{host}:{monitor_port}')}"]
    if tls is not None:
        lines.append(tls.block())
    urls = [remote_url(u.strip(), token) for u in hub_leaf_url.split(",") if u.strip()]
    remote = ([f"url: {_q(urls[0])}"] if len(urls) == 1
              else [f"urls: [ {', '.join(_q(u) for u in urls)} ]"])
    if creds is not None:
        remote.append(f"credentials: {_q(creds.resolve())}")
    if tls is not None:
        # The federation's server must show a certificate of the federation's CA.
        remote.append(f"tls: {{ ca_file: {_q(tls.ca.resolve())}, timeout: 5 }}")
    lines.append(f"leafnodes {{\n  reconnect: {LEAF_RECONNECT_S}\n  remotes: [ {{\n    "
                 + "\n    ".join(remote) + "\n  } ]\n}")
    return "\n".join(lines) + "\n"


@dataclass
class LeafNode:
    """One site's leaf nats-server, under `dir` (its config, store and log)."""

    site: str
    dir: Path
    hub_leaf_url: str
    """Where the leaf dials: the federation's leafnode listener (or a proxy in front); a
    cluster's, comma-separated."""
    creds: Path | None
    tls: ServerTls | None
    host: str = "127.0.0.1"
    port: int = 0
    server: NatsServer | None = None

    def __post_init__(self) -> None:
        self.port = self.port or free_port(self.host)

    @property
    def config_file(self) -> Path:
        return self.dir / "leaf.conf"

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls is not None else 'nats'}://{self.host}:{self.port}"

    def write_config(self, monitor_port: int) -> Path:
        token = None
        if self.creds is not None:
            from cairn.trust.nkeyjwt import read_creds_file

            token, _ = read_creds_file(self.creds)
        self.dir.mkdir(parents=True, exist_ok=True)
        text = render_leaf(site=self.site, host=self.host, port=self.port,
                           monitor_port=monitor_port, hub_leaf_url=self.hub_leaf_url,
                           creds=self.creds, token=token, tls=self.tls)
        fd = os.open(self.config_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        return self.config_file

    def start(self, *, wait: bool = True) -> LeafNode:
        server = NatsServer(self.dir / "store", port=self.port, host=self.host,
                            log_file=self.dir / "leaf.log")
        self.write_config(server.monitor_port)
        server.config_file = self.config_file
        self.server = server
        server.start(wait=wait)
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        assert self.server is not None
        self.server.wait_ready(timeout)

    def linked(self) -> bool:
        """Whether the leaf holds its connection to the federation now."""
        if self.server is None:
            return False
        try:
            with urllib.request.urlopen(self.server.monitor_url + "/leafz", timeout=1.0) as r:
                return bool(json.loads(r.read()).get("leafnodes"))
        except (OSError, ValueError):
            return False

    def wait_linked(self, timeout: float = 15.0) -> None:
        """Wait until the leaf is connected to the federation.

        Raises:
            Unavailable: not linked in time (its log says why: e.g. a refused credential).
        """
        import time

        deadline = time.monotonic() + timeout
        while not self.linked():
            if time.monotonic() > deadline:
                raise Unavailable(f"the leaf node of {self.site} did not reach the federation "
                                  f"at {self.hub_leaf_url} in {timeout:g}s; see "
                                  f"{self.dir / 'leaf.log'}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
