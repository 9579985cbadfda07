"""A secure embedded federation: a throwaway PKI and identities under its state dir, the
nats-server config that demands TLS and the authority's say, and the authority process.

`cairn up` and the test suite run this way by default; `--insecure` skips it (and says so).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cairn.errors import Unavailable
from cairn.runtime.natsserver import NatsServer
from cairn.trust.natsconfig import write_nats_config

INSECURE_WARNING = ("WARNING: running INSECURE (--insecure): no TLS, no authentication, no "
                    "authorization; anyone who reaches the NATS port can read and do anything. "
                    "For development only.")


@dataclass(frozen=True)
class Trust:
    """Where an embedded federation's PKI and kits are."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca" / "ca.pem"

    @property
    def authority(self) -> Path:
        return self.dir / "authority"

    def kit(self, name: str) -> Path:
        return self.dir / "kits" / name

    def creds(self, name: str) -> Path:
        """The credentials file of a site, admin or the HTTP API's kit."""
        kit = self.kit(name)
        for kind in ("hub", "site", "admin", "api"):
            if (kit / f"{kind}.creds").exists():
                return kit / f"{kind}.creds"
        raise Unavailable(f"no kit for {name!r} under {self.dir / 'kits'}: is it in "
                          "federation.yaml? (`cairn provision` makes one)")


PROVISIONED = "provisioned.json"
"""In the trust folder: the digest of what it was last provisioned for (the federation file,
the URL, the server's host names) and the kits it then held."""


def prepare(nats: NatsServer, federation_file: Path, trust_dir: Path, *,
            url: str | None = None) -> Trust:
    """Provision what is missing and point `nats` at the secure config (before it starts).

    Provisioning is skipped when the trust folder was provisioned for this very federation
    file, URL and hosts and every kit made then is still there (`PROVISIONED`): a `cairn
    up` on a folder it ran in before reads no federation file and writes no kit."""
    url = url or f"tls://{nats.host}:{nats.port}"
    hosts = ["localhost", nats.host]
    digest = _provision_digest(federation_file, url, hosts)
    if not _provisioned_for(trust_dir, digest):
        from cairn.spec.federation import load_federation
        from cairn.trust.provision import provision

        fed = load_federation(federation_file)
        provision(fed, trust_dir, url=url, hosts=hosts, port=nats.port,
                  monitor_port=nats.monitor_port)
        from cairn.trust.credentials import API_NAME

        kits = sorted({*(s.name for s in fed.sites), *(a.name for a in fed.admins), API_NAME})
        (trust_dir / PROVISIONED).write_text(json.dumps({"digest": digest, "kits": kits}))
    # The root seed, the CA key and every kit: this user's alone, so a worker under a uid of
    # its own cannot even look in (a sandboxed one does not see the folder at all).
    for folder in (trust_dir, trust_dir / "root"):
        folder.chmod(0o700)
    nats.config_file = write_nats_config(trust_dir, host=nats.host, port=nats.port,
                                         monitor_port=nats.monitor_port,
                                         store_dir=nats.store_dir.resolve())
    return Trust(trust_dir)


def provisioned(nats: NatsServer, federation_file: Path, trust_dir: Path, *,
                url: str | None = None) -> bool:
    """Whether `prepare` would provision nothing: the trust folder was provisioned for this
    very federation file, URL and hosts, and every kit made then is still there."""
    url = url or f"tls://{nats.host}:{nats.port}"
    try:
        digest = _provision_digest(federation_file, url, ["localhost", nats.host])
    except OSError:
        return False
    return _provisioned_for(trust_dir, digest)


def _provision_digest(federation_file: Path, url: str, hosts: list[str]) -> str:
    data = json.dumps({"federation": federation_file.read_bytes().hex(), "url": url,
                       "hosts": hosts}).encode()
    return hashlib.sha256(data).hexdigest()


def _provisioned_for(trust_dir: Path, digest: str) -> bool:
    try:
        record = json.loads((trust_dir / PROVISIONED).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("digest") != digest:
        return False
    kits = record.get("kits")
    from cairn.trust.credentials import API_NAME

    # The API's kit too: a folder provisioned before the API had an identity gets it now.
    needed = [trust_dir / "ca" / "ca.pem", trust_dir / "server" / "server.pem",
              trust_dir / "authority" / "account.nk", trust_dir / "root" / "root.nk",
              trust_dir / "kits" / API_NAME / "kit.yaml"]
    if not isinstance(kits, list) or not all(isinstance(k, str) and k for k in kits):
        return False
    return all(p.exists() for p in needed) and all(
        (trust_dir / "kits" / k / "kit.yaml").is_file() and "/" not in k for k in kits)


def authority_args(trust: Trust, url: str, federation_file: Path,
                   servers: int = 1) -> list[str]:
    """`python -m cairn.authority` arguments for this federation's authority."""
    # `cairn up`'s own nats-servers, as many as it runs: no other's connections to wait for.
    return ["--kit", str(trust.authority), "--nats-url", url, "--federation",
            str(federation_file), "--servers", str(servers)]


def spawn_authority(args: list[str], env: dict[str, str],
                    log: Path) -> subprocess.Popen[bytes]:
    """Start the authority (`wait_authority` waits until it answers)."""
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "cairn.authority", *args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)


def wait_authority(trust: Trust, proc: Polled, log: Path, timeout: float = 30.0) -> None:
    """Wait until the authority answers the server's auth requests (its ready file).

    Raises:
        Unavailable: it exited, or was not ready in time (it is killed then).
    """
    ready = trust.authority / "ready"
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None:
            raise Unavailable(f"the authority exited with {proc.returncode}; see {log}"
                              f"{last_words(log)}")
        if time.monotonic() > deadline:
            proc.kill()
            raise Unavailable(f"the authority was not ready after {timeout:g}s; see {log}")
        time.sleep(0.005)


def last_words(log: Path, lines: int = 8, limit: int = 64 * 1024) -> str:
    """What a process that exited last wrote to `log` (its last `lines` lines, read from
    at most the last `limit` bytes), for the message that says it exited; "" if none."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - limit))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    last = [line[:500] for line in text.splitlines() if line.strip()][-lines:]
    if not last:
        return ""
    return "; it last said:" + "".join(f"\n  {line}" for line in last)


def start_authority(trust: Trust, url: str, federation_file: Path, env: dict[str, str],
                    log: Path, timeout: float = 30.0) -> subprocess.Popen[bytes]:
    """Start the authority and wait until it answers the server's auth requests."""
    (trust.authority / "ready").unlink(missing_ok=True)
    proc = spawn_authority(authority_args(trust, url, federation_file), env, log)
    wait_authority(trust, proc, log, timeout)
    return proc


class Polled(Protocol):
    """A child process as `subprocess.Popen` and `cairn.runtime.forked.ForkedProcess` are."""

    returncode: int | None

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...


def service_args(trust: Trust, name: str) -> list[str]:
    """`cairn run` flags for a parent that connects as kit `name`."""
    return ["--creds", str(trust.creds(name)), "--tls-ca", str(trust.ca)]

