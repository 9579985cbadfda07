"""A federation of insiders for the trust tests: four sites of three organisations and two
studies, every participant holding its own credential.

    alpha: hub, site-a, site-c   admins: alice@org-a (lead)
    beta:  hub, site-b, site-c   admins: bob@org-b (lead)
    admin@coord is the project admin (every study)

The probes are plain nats-py connections holding a participant's own credential, as an
attacker at that participant would (see security_helpers.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cairn.client import Client
from cairn.runtime.context import Context
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from cairn.trust.credentials import mint_worker
from cairn.trust.nkeyjwt import creds_file_text, read_creds
from tests.fixtures.federation import make_federation, running
from tests.integration.cp_helpers import write_job

SITES = ("hub", "site-a", "site-b", "site-c")
STUDIES = {"alpha": ("hub", "site-a", "site-c"), "beta": ("hub", "site-b", "site-c")}
LEADS = {"alpha": "alice@org-a", "beta": "bob@org-b"}
HELD = """\
import pathlib, time
marker = pathlib.Path(MARKER)
deadline = time.time() + 120
while not marker.exists() and time.time() < deadline:
    time.sleep(0.05)
import asyncio
from cairn.worker import Worker
async def main():
    async with Worker.from_env() as w:
        await w.result({"finished": marker.exists()})
asyncio.run(main())
"""
"""A worker that waits (120 s at most) for the file MARKER, then returns whether it came."""


def held_job(folder: Path, marker: Path, name: str = "hello") -> Path:
    """A job of one client at site-a, held until `marker` exists (`HELD`)."""
    return write_job(folder, name=name, script=HELD.replace("MARKER", repr(str(marker))),
                     roles="""\
        roles:
          client:
            entrypoint: python main.py
            sites: [site-a]
            resources: {cpus: 1, memory: 256Mi}
        """)


async def until_running(client: Client, job: str) -> None:
    """Returns once `job` runs (its worker started)."""
    async def runs() -> bool:
        return (await client.job(job)).state == "running"
    await wait_for(runs, "the job runs")


def write_insider_files(fed: EmbeddedFederation) -> None:
    """federation.yaml and every site's study_runtime.yaml, before the federation starts."""
    fed.dir.mkdir(parents=True, exist_ok=True)
    orgs = {"hub": "coord", "site-a": "org-a", "site-b": "org-b", "site-c": "org-c"}
    doc = {
        "federation": "local", "hub": "hub",
        "sites": [{"name": s, "org": orgs[s]} for s in SITES],
        "admins": [{"name": DEFAULT_ADMIN, "org": "coord", "role": "project_admin"},
                   {"name": "alice@org-a", "org": "org-a", "role": "lead"},
                   {"name": "bob@org-b", "org": "org-b", "role": "lead"}],
        "studies": {study: {"sites": list(sites), "admins": [LEADS[study]]}
                    for study, sites in STUDIES.items()},
    }
    fed.federation_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    for site in SITES:
        local = fed.site_dir(site) / "local"
        data = fed.site_dir(site) / "data" / "shared"
        local.mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        policy = {"datasets": {"shared": {"source": str(data.resolve()), "mode": "rw"}},
                  "limits": {"gpus": 0, "cpus": 4, "memory": "8Gi", "concurrent_jobs": 4}}
        studies: dict[str, Any] = {s: policy for s, members in STUDIES.items()
                                   if site in members}
        studies["validation"] = {"limits": {"cpus": 4, "memory": "8Gi",
                                            "concurrent_jobs": 1}}
        (local / "study_runtime.yaml").write_text(
            yaml.safe_dump({"format": 1, "studies": studies}, sort_keys=False))


@pytest.fixture
async def insiders(tmp_path: Path) -> AsyncIterator[EmbeddedFederation]:
    fed = make_federation(tmp_path, sites=SITES)
    write_insider_files(fed)
    async with running(fed, healthy_s=90):
        yield fed


async def admin_of(fed: EmbeddedFederation, study: str, actor: str | None = None) -> Client:
    assert fed.nats is not None
    who = actor or LEADS[study]
    return await Client.connect(Context(nats_url=fed.nats.url, study=study, actor=who,
                                        **fed.client_options(who)))


def kit(fed: EmbeddedFederation, name: str) -> Path:
    assert fed.trust is not None
    return fed.trust.creds(name)


def worker_creds(fed: EmbeddedFederation, tmp: Path, *, study: str, job: str, site: str,
                 role: str = "client", lifetime_s: float = 600) -> Path:
    """A worker credential as the site's launcher would mint it (the job code's own)."""
    assert fed.trust is not None
    site_kit = fed.trust.kit(site)
    site_jwt, _ = read_creds(fed.trust.creds(site).read_text())
    launch = f"{job}/{site}/{role}/0/0"
    jwt, seed = mint_worker(site_jwt=site_jwt,
                            signing_seed=(site_kit / "signing.nk").read_text().strip(),
                            study=study, job=job, site=site, role=role, attempt=0,
                            launch_id=launch, expires=int(time.time() + lifetime_s))
    path = tmp / f"{job}-{site}-{role}.creds"
    path.write_text(creds_file_text(jwt, seed))
    return path


async def restart_authority(fed: EmbeddedFederation, *, kill: bool = True) -> None:
    """kill -9 the authority and start it again; returns once it answers callouts."""
    assert fed.trust is not None
    ready = fed.trust.authority / "ready"
    if kill:
        fed.kill("authority")
    ready.unlink(missing_ok=True)
    fed.respawn("authority")
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert fed.process("authority").proc.poll() is None, "the authority exited"
        assert time.monotonic() < deadline, "the authority did not come back"
        await asyncio.sleep(0.05)


async def wait_for(predicate: Any, what: str, timeout: float = 30.0) -> None:
    """Poll an async predicate (each call asks the real system) until it holds."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        await asyncio.sleep(0.1)
