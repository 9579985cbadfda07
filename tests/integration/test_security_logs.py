"""The site log API (`cairn.api.site.<site>.logs`, served by the launcher) is signed and
scoped: a caller reads a worker's log only when the job's study is one of its own, and an
unsigned request is refused, on a real secure embedded federation. The broker lets every
admin of a study that site-a is in ask site-a's launcher, so the launcher has to check."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from cairn import api, subjects
from cairn.client import Client
from cairn.errors import NotFound, PermissionDenied, Unavailable
from cairn.events import StudyAdmin
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.federation import connect, make_federation
from tests.integration.cp_helpers import ONLY_SITE_A, write_job
from tests.integration.security_helpers import connect_as

LINE = "a line only demo's admins may read"
SCRIPT = f'print("{LINE}", flush=True)\n'
BOB, EVE = "bob@org-site-b", "eve@org-site-a"


async def _log_of(c: Client, launch_id: str, study: str | None) -> bytes:
    result = await c.call(subjects.site_logs("site-a"), api.LogRead(launch_id=launch_id),
                          study=study)
    assert isinstance(result, api.LogData)
    return base64.b64decode(result.data_b64)


async def test_only_admins_of_the_jobs_study_read_its_log(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    fed = federation
    job = await client.submit(write_job(job_dir, name="logged", script=SCRIPT,
                                        roles=ONLY_SITE_A))
    final = await client.wait(job, timeout=60)
    assert final.state == "completed", final
    [worker] = final.workers.values()
    launch_id = worker.launch_id
    # Bob administers demo (not the federation); eve administers `other`, which site-a is
    # in too, so the broker lets her ask site-a's launcher.
    await client.study_add_admin(BOB, "org-site-b", "lead")
    await client.study_create("other", ["site-a"], [StudyAdmin(name=EVE, org="org-site-a",
                                                               role="lead")])
    bob = await connect(fed, study="demo", actor=BOB)
    eve = await connect(fed, study="other", actor=EVE)
    try:
        # The job's admin gets it, through the client and straight from the API.
        assert LINE in b"".join([c.data async for c in bob.logs(job)]).decode()
        assert LINE.encode() in await _log_of(bob, launch_id, "demo")
        assert LINE.encode() in await _log_of(client, launch_id, "demo")  # project admin

        # An admin of another study: refused, whichever study the request names.
        for named in ("demo", None):
            with pytest.raises(PermissionDenied) as refused:
                await _log_of(eve, launch_id, named)
            assert f"{EVE} is not an admin of study demo" in str(refused.value)
        # Naming her own study instead: no such worker in it (or, while site-a's connection
        # is not yet renewed with `other`, not hers to ask about there yet, or, on a busy
        # machine, not yet known: "try again"). Never the log.
        with pytest.raises((NotFound, PermissionDenied, Unavailable)):
            await _log_of(eve, launch_id, "other")
    finally:
        await bob.close()
        await eve.close()

    # Unsigned, from a connection the broker lets ask (bob's): refused, naming why.
    assert fed.trust is not None
    probe = await connect_as(fed, fed.trust.creds(BOB))
    try:
        unsigned = api.Envelope(request=api.LogRead(launch_id=launch_id), actor=BOB,
                                study="demo")
        # site-a's launcher may be reconnecting (its session renewed: it joined `other`):
        # asked until it answers again. A request made just as its old connection closed is
        # lost rather than refused (no answer at all): asked again too; it reads nothing.
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            try:
                reply = await asyncio.wait_for(probe.nc.request(
                    subjects.site_logs("site-a"), api.encode_envelope(unsigned), timeout=10),
                    15)
                break
            except (NoRespondersError, NatsTimeout, TimeoutError):
                assert asyncio.get_running_loop().time() < deadline, "site-a never answered"
                await asyncio.sleep(0.1)
        with pytest.raises(PermissionDenied) as refused:
            api.decode_reply(reply.data, subject=subjects.site_logs("site-a"))
        assert "unsigned request" in str(refused.value)
        assert LINE not in reply.data.decode()
    finally:
        await probe.close()


async def test_an_insecure_federation_still_reads_logs_unsigned(tmp_path: Path) -> None:
    """`cairn up --insecure`: no credentials, nothing signed, and logs (and launches, which
    the launcher checks against studies it learns from the streams there) still work."""
    fed = make_federation(tmp_path)
    fed.secure = False
    fed.start()
    try:
        await fed.wait_healthy(60)
        async with await connect(fed) as c:
            job = await c.submit(write_job(tmp_path / "job", name="logged", script=SCRIPT,
                                           roles=ONLY_SITE_A))
            final = await c.wait(job, timeout=60)
            assert final.state == "completed", final
            assert LINE in b"".join([chunk.data async for chunk in c.logs(job)]).decode()
    finally:
        fed.stop()
