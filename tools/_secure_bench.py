"""A nats-server as `cairn up` runs it (TLS, the federation's identities, the authority), for
the benchmarks that measure what security costs (bench_security, bench_nonces)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from cairn.runtime import secure
from cairn.runtime.context import tls_context
from cairn.runtime.natsserver import NatsServer
from cairn.runtime.secure import Trust

FEDERATION = {"federation": "bench", "hub": "hub",
              "sites": [{"name": "hub", "org": "coord"}, {"name": "site-a", "org": "org-a"}],
              "admins": [{"name": "admin@coord", "org": "coord", "role": "project_admin"}],
              "studies": {"demo": {"sites": ["hub", "site-a"], "admins": ["admin@coord"]}}}


@contextmanager
def secure_server(root: Path, name: str = "secure") -> Iterator[tuple[NatsServer, Trust]]:
    """The server (its store under `root/name`) and the federation's trust, for the block;
    the authority answers its callouts until the block ends."""
    fed_file = root / "federation.yaml"
    fed_file.write_text(yaml.safe_dump(FEDERATION))
    server = NatsServer(root / name)
    trust = secure.prepare(server, fed_file, root / "trust")
    server.start()
    authority = secure.start_authority(trust, server.url, fed_file, {}, root / "auth.log")
    try:
        yield server, trust
    finally:
        authority.terminate()
        authority.wait(10)
        server.stop()


def server_tls(trust: Trust) -> ssl.SSLContext:
    """TLS that trusts the federation's CA (a client identity comes from its creds)."""
    return tls_context(str(trust.ca), None, None)
