"""A worker's job-lifetime credential: confined to its own subjects and its job's data plane,
cut off within seconds of its job's end. Minted by the site's launcher, as in production."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from cairn import subjects
from cairn.client import Client
from cairn.runtime.context import Context
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from tests.integration.cp_helpers import release_workers, worker_dirs, write_job
from tests.integration.security_helpers import connect_as, refused_at_connect

# The worker keeps a copy of its credential (as a compromised worker would: in its own
# folder, the only one of the host it sees) and lingers until told to stop.
LINGER = """\
import os, shutil, time
shutil.copy(os.environ["CAIRN_CREDS_FILE"], "stolen.creds")
deadline = time.time() + 90
while time.time() < deadline and not os.path.exists("stop"):
    time.sleep(0.05)
"""


async def _stolen(fed: EmbeddedFederation, job: str, site: str, timeout: float) -> Path:
    """The credential copy the job's worker at `site` left in its folder, once complete."""
    deadline = time.monotonic() + timeout
    while True:
        for folder in worker_dirs(fed, job, site):
            path = folder / "stolen.creds"
            if path.exists() and path.read_text().rstrip().endswith("END USER NKEY SEED------"):
                return path
        assert time.monotonic() < deadline, f"no stolen credential at {site}"
        await asyncio.sleep(0.05)


async def test_a_worker_credential_is_confined_to_its_job_and_dies_with_it(
        secure_federation: EmbeddedFederation, tmp_path: Path) -> None:
    fed = secure_federation
    assert fed.nats is not None
    client = await Client.connect(Context(nats_url=fed.nats.url, study="demo",
                                          **fed.client_options(DEFAULT_ADMIN)))
    job = ""
    try:
        job = await client.submit(write_job(tmp_path / "job", name="linger", script=LINGER))
        stolen = await _stolen(fed, job, "site-a", 60)
        worker = await connect_as(fed, stolen)
        own = subjects.job_worker("demo", job, "site-a", "client", "progress")
        coordinator = subjects.job("demo", job, "completed")
        launcher = subjects.job_site("demo", job, "site-a", "exited")
        other_job = subjects.data_all("demo", "j-someone-else")
        await worker.nc.publish(own, b"{}")
        await worker.nc.publish(coordinator, b"{}")
        await worker.nc.publish(launcher, b"{}")
        await worker.nc.subscribe(other_job)
        await worker.nc.publish("$JS.API.CONSUMER.CREATE.DATA_demo", b"{}")
        await worker.settled()  # every refusal is in
        assert not worker.refused(own), worker.errors
        assert worker.refused(f'publish to "{coordinator}"')
        assert worker.refused(f'publish to "{launcher}"')
        assert worker.refused(f'subscription to "{other_job}"')
        assert worker.refused('publish to "$JS.API.CONSUMER.CREATE.DATA_demo"')
        # The job ends: the lingering credential is cut off within 5 s and refused after.
        release_workers(fed, job, "stop")
        final = await client.wait(job, timeout=60)
        assert final.state == "completed", final.cause
        ended = time.monotonic()
        await asyncio.wait_for(worker.closed.wait(), 5.0)
        assert time.monotonic() - ended < 5.0
        assert await refused_at_connect(fed, stolen)
    finally:
        if job:
            release_workers(fed, job, "stop")
        await client.close()
