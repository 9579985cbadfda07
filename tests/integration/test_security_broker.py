"""The broker enforces who may connect and what each identity may read and write.

Real nats-server, real authority, real services; the probes are plain nats-py clients holding
a participant's own credential, as an attacker at that site would.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from cairn import subjects
from cairn.client import Client
from cairn.events import StudyAdmin
from cairn.runtime.context import Context
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from cairn.spec.federation import load_federation
from cairn.trust.credentials import mint_worker
from cairn.trust.nkeyjwt import creds_file_text, read_creds
from cairn.trust.provision import provision, revoke
from tests.integration.cp_helpers import default_policy, rewrite_runtime, write_job
from tests.integration.security_helpers import connect_as, refused_at_connect

SECRET = "s-secret"


async def _admin(fed: EmbeddedFederation, study: str = "demo") -> Client:
    assert fed.nats is not None
    return await Client.connect(Context(nats_url=fed.nats.url, study=study,
                                        **fed.client_options(DEFAULT_ADMIN)))


def _kit(fed: EmbeddedFederation, name: str) -> Path:
    assert fed.trust is not None
    return fed.trust.creds(name)


async def test_a_site_outside_a_study_sees_none_of_it_and_cannot_write_into_it(
        secure_federation: EmbeddedFederation, tmp_path: Path) -> None:
    fed = secure_federation
    admin = await _admin(fed)
    await admin.study_create(SECRET, ["site-a"], [StudyAdmin(name=DEFAULT_ADMIN, org="coord",
                                                             role="lead")])
    await admin.close()
    policy = default_policy(fed, "site-a")
    await rewrite_runtime(fed, "site-a", {"demo": policy, SECRET: policy})
    spy = await connect_as(fed, _kit(fed, "site-b"))

    async def note(msg: object) -> None:
        spy.received.append(str(getattr(msg, "subject", "")))

    for subject in ("cairn.>", subjects.study_all(SECRET), subjects.data_all(SECRET), ">"):
        await spy.nc.subscribe(subject, cb=note)
    await spy.nc.flush(timeout=5)
    secret = await _admin(fed, SECRET)
    try:
        job = await secret.submit(write_job(tmp_path / "job", name="secret"))
        final = await secret.wait(job, timeout=60)
        assert final.state == "completed", (final.cause, list(final.workers.values()))
        # Writing into the study, or as another site, is refused by the server.
        forged = subjects.job_site(SECRET, job, "site-b", "accepted")
        await spy.nc.publish(forged, b"{}")
        await spy.nc.publish(subjects.site_launch("site-a", "requested"), b"{}")
        await spy.nc.publish(subjects.job(SECRET, job, "completed"), b"{}")
        js_read = f"$JS.API.CONSUMER.CREATE.{subjects.study_stream(SECRET).name}"
        await spy.nc.publish(js_read, b"{}")
        await spy.settled()  # every refusal is in
        assert [s for s in spy.received if SECRET in s] == []
        assert spy.received == [], "every subscription above was refused"
        assert spy.refused('subscription to "cairn.>"')
        assert spy.refused(f'subscription to "{subjects.study_all(SECRET)}"')
        for subject in (forged, subjects.site_launch("site-a", "requested"),
                        subjects.job(SECRET, job, "completed"), js_read):
            assert spy.refused(f'publish to "{subject}"'), (subject, spy.errors)
        events = [e async for e in _job_subjects(fed, job)]
        assert forged not in events, "the forged event was not stored"
    finally:
        await secret.close()
        await spy.close()


async def _job_subjects(fed: EmbeddedFederation, job: str) -> AsyncIterator[str]:
    from cairn.bus import replay

    bus = await fed.bus()
    try:
        async for item in replay(bus, subjects.study_stream(SECRET).name,
                                 filters=[subjects.job_all(SECRET, job)]):
            yield item.subject
    finally:
        await bus.close()


async def test_unauthenticated_foreign_expired_and_revoked_clients_are_refused_at_connect(
        secure_federation: EmbeddedFederation, tmp_path: Path) -> None:
    fed = secure_federation
    assert fed.trust is not None
    assert await refused_at_connect(fed, None)
    # A credential from another federation's root.
    other = tmp_path / "other-trust"
    provision(load_federation(fed.federation_file), other, url="tls://127.0.0.1:1",
              hosts=["127.0.0.1"], port=1)
    assert await refused_at_connect(fed, other / "kits" / "site-a" / "site.creds")
    # An expired worker credential, minted by a real site key.
    kit = fed.trust.kit("site-a")
    site_jwt, _ = read_creds((kit / "site.creds").read_text())
    jwt, seed = mint_worker(site_jwt=site_jwt, signing_seed=(kit / "signing.nk").read_text()
                            .strip(), study="demo", job="j-old", site="site-a", role="client",
                            attempt=0, launch_id="j-old/site-a/client/0/0",
                            expires=int(time.time()) - 1)
    expired = tmp_path / "expired.creds"
    expired.write_text(creds_file_text(jwt, seed))
    assert await refused_at_connect(fed, expired)
    # A revoked site: refused from now on, and its open connection is cut.
    live = await connect_as(fed, _kit(fed, "site-b"))
    revoke(fed.trust.dir, "site-b")
    await asyncio.wait_for(live.closed.wait(), 5)
    assert await refused_at_connect(fed, _kit(fed, "site-b"))
    # Everyone else still gets in.
    ok = await connect_as(fed, _kit(fed, "site-a"))
    await ok.close()
    # The CLI without a credential: one line saying why, exit 5 (7 without the CA).
    assert fed.nats is not None
    env = {**os.environ, "CAIRN_NATS_URL": fed.nats.url, "CAIRN_TLS_CA": str(fed.trust.ca),
           "CAIRN_CONTEXT": str(tmp_path / "none.yaml")}
    env.pop("CAIRN_CREDS", None)
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "cairn", "site",
                                                    "list"], env=env, capture_output=True,
                                   text=True, timeout=60)
    assert done.returncode == 5, done.stderr
    assert "refused this connection" in done.stderr and "Traceback" not in done.stderr


async def _may_subscribe(fed: EmbeddedFederation, creds: Path, subject: str) -> bool:
    probe = await connect_as(fed, creds)
    try:
        await probe.nc.subscribe(subject)
        await probe.settled()  # a refusal would be in by now
        return not probe.refused(f'subscription to "{subject}"')
    finally:
        await probe.close()


async def test_membership_changes_reach_the_broker_within_seconds(
        secure_federation: EmbeddedFederation) -> None:
    fed = secure_federation
    admin = await _admin(fed)
    await admin.study_create(SECRET, ["site-a"], [StudyAdmin(name=DEFAULT_ADMIN, org="coord",
                                                             role="lead")])
    await admin.close()
    commands = subjects.site_cmds(SECRET, "site-b")
    creds = _kit(fed, "site-b")
    assert not await _may_subscribe(fed, creds, commands)
    secret = await _admin(fed, SECRET)
    try:
        # A connection open across the change is renewed under the new rules by itself.
        live = await connect_as(fed, creds, reconnect=True)
        await secret.study_add_site("site-b")
        deadline = time.monotonic() + 5
        while not await _may_subscribe(fed, creds, commands):
            assert time.monotonic() < deadline, "site-b was not let in within 5 s"
            await asyncio.sleep(0.1)
        deadline = time.monotonic() + 5
        while not (live.nc.is_connected and live.nc.stats["reconnects"] >= 1):
            assert time.monotonic() < deadline, "the open connection was not renewed"
            await asyncio.sleep(0.05)
        await live.close()
        await secret.study_remove_site("site-b")
        deadline = time.monotonic() + 5
        while await _may_subscribe(fed, creds, commands):
            assert time.monotonic() < deadline, "site-b kept its rights for over 5 s"
            await asyncio.sleep(0.1)
    finally:
        await secret.close()
