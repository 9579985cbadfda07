"""A NATS cluster on loopback for `cairn up --cluster N`: N nats-servers routed to each other
over TLS (certificates from the federation's own CA), each with JetStream and the authority's
auth callout.

Every server has the same accounts and the same callout: a client that connects to any of
them is sent to the one authority, whose callout subscription reaches every server over the
routes. Clients are given every server's URL (`NatsCluster.url` is the comma-separated list)
and fail over by themselves; streams and buckets get `min(3, N)` copies
(`cairn.bus._replicas`), so the loss of one server loses no event.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.errors import InvalidInput, Unavailable
from cairn.runtime.natsserver import NatsServer, free_port

if TYPE_CHECKING:
    from cairn.runtime.embedded import EmbeddedFederation

CLUSTER_NAME = "cairn"
MAX_SERVERS = 7
"""More servers than this on one machine buys nothing but elections."""
LEASE_TTL_S = 30.0
"""The leases' TTL on a cluster, unless one is set (`CAIRN_LEASE_TTL_S`). A lease must outlive
the election that follows the loss of its bucket's leader, plus up to a third of the TTL since
the last renewal: JetStream takes no write meanwhile, and expires the key by its age once a
new leader is up. Elections took 4.7-7.7 s on a loaded two-core machine, and over 8 s once
(tests/integration/test_cluster.py); with one server's 3 s, or 15 s, a holder whose bucket
lost its leader could lose its lease and restart. A standby takes over that much later when
the active one dies."""
ROUTE_CERT = "route.pem"
ROUTE_KEY = "route.key"
"""In the trust folder's `server/`, from `cairn.trust.pki.write_route_cert`."""


def check_size(size: int) -> int:
    """`size` when it is a cluster size `cairn up` can run.

    Raises:
        InvalidInput: it is under 1 or over `MAX_SERVERS`.
    """
    if not 1 <= size <= MAX_SERVERS:
        raise InvalidInput(f"--cluster {size}: a cluster has 1 to {MAX_SERVERS} servers "
                           "(3 is the usual: it survives the loss of any one)")
    return size


def _q(value: str | Path) -> str:
    return json.dumps(str(value))


def cluster_block(*, host: str, route_port: int, peers: list[int], cert: Path, key: Path,
                  ca: Path, name: str = CLUSTER_NAME) -> str:
    """The `cluster {}` section of one member: its route listener and every peer's, with
    mutual TLS (a peer must show a certificate of the federation's CA)."""
    routes = ", ".join(_q(f"nats-route://{host}:{p}") for p in peers)
    return f"""
cluster {{
  name: {_q(name)}
  listen: {_q(f"{host}:{route_port}")}
  routes: [ {routes} ]
  tls {{
    cert_file: {_q(cert)}
    key_file: {_q(key)}
    ca_file: {_q(ca)}
    verify: true
    timeout: 5
  }}
}}
"""


class NatsCluster:
    """N nats-servers on loopback with routes between them; member 0 takes `port`."""

    def __init__(self, root: Path, size: int, *, port: int = 0,
                 host: str = "127.0.0.1") -> None:
        check_size(size)
        self.root = root
        self.host = host
        self.members = [NatsServer(root / f"n{i}", port=port if i == 0 else 0, host=host)
                        for i in range(size)]
        self.route_ports = [free_port(host) for _ in self.members]
        self.leaf_ports: list[int] = []
        """Each member's leafnode listener, where sites' leaf nodes dial (`--leaf-sites`)."""

    @classmethod
    def of(cls, fed: EmbeddedFederation) -> NatsCluster:
        """The cluster of `fed.cluster_size` servers under `fed.dir/nats/cluster`, member 0
        on `fed.port`.

        Raises:
            Unavailable: `fed` is insecure (see `require_secure`).
        """
        require_secure(fed.cluster_size, fed.secure)
        return cls(fed.dir / "nats" / "cluster", fed.cluster_size, port=fed.port)

    def env(self) -> dict[str, str]:
        """What every process of a federation on this cluster is given."""
        from cairn.bus._replicas import REPLICAS_ENV, replicas_for
        from cairn.runtime.standby import TTL_ENV

        return {REPLICAS_ENV: str(replicas_for(self.size)), TTL_ENV: f"{LEASE_TTL_S:g}"}

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def url(self) -> str:
        """Every member's client URL, comma-separated (what `Bus.connect` and site.yaml
        take)."""
        return ",".join(m.url for m in self.members)

    @property
    def leaf_url(self) -> str:
        """Every member's leafnode listener, comma-separated (where a leaf node dials: it
        fails over among them as a client does)."""
        return ",".join(f"tls://{self.host}:{p}" for p in self.leaf_ports)

    def configure(self, trust_dir: Path, *, leaves: bool = False) -> None:
        """Write each member's config under `trust_dir/server` (TLS for clients and routes,
        the auth callout), after `cairn.runtime.secure.prepare` provisioned the folder.

        With `leaves`, each member also listens for sites' leaf nodes (TLS, the auth
        callout deciding each link as it decides a client) and runs JetStream in the
        federation's domain, which a leaf's clients name to reach it (`cairn.runtime.leaf`).
        """
        from cairn.runtime.leaf import ServerTls, hub_leafnodes_block
        from cairn.subjects.table import JS_DOMAIN
        from cairn.trust.natsconfig import authority_keys, render
        from cairn.trust.pki import write_route_cert

        # `cairn provision` makes it; a trust folder provisioned before it did gets one now.
        write_route_cert(trust_dir / "server", trust_dir / "ca", ["localhost", self.host],
                         federation="local")
        server = (trust_dir / "server").resolve()
        keys = authority_keys(trust_dir)
        if leaves and not self.leaf_ports:
            self.leaf_ports = [free_port(self.host) for _ in self.members]
        tls = ServerTls(cert=server / "server.pem", key=server / "server.key",
                        ca=server / "ca.pem")
        for i, member in enumerate(self.members):
            text = render(keys, host=member.host, port=member.port,
                          store_dir=member.store_dir.resolve(), cert=tls.cert, key=tls.key,
                          ca=tls.ca, monitor_port=member.monitor_port, server_name=f"cairn-{i}",
                          js_domain=JS_DOMAIN if leaves else "")
            if leaves:
                text += hub_leafnodes_block(self.host, self.leaf_ports[i], tls)
            text += cluster_block(host=self.host, route_port=self.route_ports[i],
                                  peers=[p for j, p in enumerate(self.route_ports) if j != i],
                                  cert=server / ROUTE_CERT, key=server / ROUTE_KEY,
                                  ca=server / "ca.pem")
            path = server / f"nats-{i}.conf"
            path.write_text(text)
            member.config_file = path

    def start(self, timeout: float = 30.0, *, wait: bool = True) -> NatsCluster:
        """Start every member (each finds the others through its routes)."""
        for member in self.members:
            member.start(wait=False)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until every member is healthy (JetStream included: a member's /healthz
        answers 200 once the cluster has a meta leader and its streams are current).

        Raises:
            Unavailable: a member exited or was not healthy in time.
        """
        deadline = time.monotonic() + timeout
        for member in self.members:
            member.wait_ready(max(1.0, deadline - time.monotonic()))

    def restart(self, index: int, timeout: float = 30.0) -> None:
        """Start member `index` again on its same ports, store and config."""
        self.members[index].restart(timeout)

    def alive(self) -> list[int]:
        return [i for i, m in enumerate(self.members)
                if m.proc is not None and m.proc.poll() is None]

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def kill(self, index: int) -> None:
        """SIGKILL member `index`, as a crash would."""
        self.members[index].kill()


def require_secure(size: int, secure: bool) -> None:
    """A cluster runs secure only: its routes carry every account's traffic.

    Raises:
        Unavailable: `--cluster` over 1 with `--insecure`.
    """
    if size > 1 and not secure:
        raise Unavailable("--cluster runs only secure (TLS on client and route connections, "
                          "the authority on every server): drop --insecure")
