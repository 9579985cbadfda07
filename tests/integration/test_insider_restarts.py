"""Security state survives restarts: a restarted authority knows every live connection and
applies job ends and membership to them; every connection's rights expire and renew; a
connection it has no record of is decided afresh; a study's creation is its members' news."""

from __future__ import annotations

from pathlib import Path

from cairn import subjects
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.federation import make_federation
from tests.integration.cp_helpers import write_job
from tests.integration.insiders import (
    SITES,
    admin_of,
    held_job,
    insiders,
    kit,
    restart_authority,
    until_running,
    wait_for,
    worker_creds,
    write_insider_files,
)
from tests.integration.security_helpers import connect_as

__all__ = ["insiders"]


async def test_a_restarted_authority_cuts_off_what_it_admitted_before(
        insiders: EmbeddedFederation, tmp_path: Path) -> None:
    fed = insiders
    alpha = await admin_of(fed, "alpha")
    marker = tmp_path / "release"
    try:
        job = await alpha.submit(held_job(tmp_path / "job", marker))
        await until_running(alpha, job)
        # The job's code holds its worker credential, connected before the restart.
        worker = await connect_as(fed, worker_creds(fed, tmp_path, study="alpha", job=job,
                                                    site="site-a"))
        site_c = await connect_as(fed, kit(fed, "site-c"), reconnect=True)
        await restart_authority(fed)
        assert not worker.closed.is_set(), "a live worker of a live job stays connected"
        marker.touch()
        assert (await alpha.wait(job, timeout=90)).state == "completed"

        async def cut_off() -> bool:
            return worker.closed.is_set()
        await wait_for(cut_off, "the job ended: its worker is cut off", 10)

        # Membership changed after the restart reaches a connection admitted before it.
        boss = await admin_of(fed, "alpha", actor="admin@coord")
        try:
            await boss.study_remove_site("site-c")
        finally:
            await boss.close()

        async def dropped() -> bool:
            return site_c.closed.is_set() or site_c.nc.stats["reconnects"] >= 1
        await wait_for(dropped, "site-c is disconnected when it leaves alpha", 10)
        probe = await connect_as(fed, kit(fed, "site-c"))
        try:
            await probe.nc.subscribe(subjects.study_all("alpha"))
            assert await probe.wait_refused(f'subscription to "{subjects.study_all("alpha")}"')
        finally:
            await probe.close()
        await site_c.close()
        await worker.close()
    finally:
        await alpha.close()


async def test_a_connection_with_no_record_is_decided_again(
        insiders: EmbeddedFederation) -> None:
    fed = insiders
    assert fed.trust is not None
    probe = await connect_as(fed, kit(fed, "site-b"), reconnect=True)
    try:
        # As if the authority died after admitting it and before recording it.
        bus = await fed.bus()
        try:
            from cairn.authority.connections import BUCKET

            await bus.js.delete_key_value(BUCKET)
        finally:
            await bus.close()
        await restart_authority(fed)

        async def reconnected() -> bool:
            return probe.nc.stats["reconnects"] >= 1 and probe.nc.is_connected
        await wait_for(reconnected, "the unknown connection was sent back through the "
                       "authority", 15)
    finally:
        await probe.close()


async def test_rights_expire_and_renew_and_work_goes_on(tmp_path: Path) -> None:
    fed = make_federation(tmp_path, sites=SITES)
    fed.extra_env["CAIRN_AUTHORITY_SESSION_S"] = "4"
    write_insider_files(fed)
    fed.start()
    try:
        await fed.wait_healthy(90)
        probe = await connect_as(fed, kit(fed, "site-a"), reconnect=True)

        async def renewed() -> bool:
            return probe.nc.stats["reconnects"] >= 2 and probe.nc.is_connected
        await wait_for(renewed, "a 4 s session is renewed twice", 20)
        alpha = await admin_of(fed, "alpha")
        try:
            job = await alpha.submit(write_job(tmp_path / "job", roles="""\
                roles:
                  client:
                    entrypoint: python main.py
                    sites: [site-a, site-c]
                    resources: {cpus: 1, memory: 256Mi}
                """))
            assert (await alpha.wait(job, timeout=120)).state == "completed"
        finally:
            await alpha.close()
        await probe.close()
    finally:
        fed.stop()


async def test_a_study_is_news_only_to_its_members(insiders: EmbeddedFederation,
                                                   tmp_path: Path) -> None:
    fed = insiders
    outsider = await connect_as(fed, kit(fed, "site-b"))

    async def note(msg: object) -> None:
        outsider.received.append(str(getattr(msg, "subject", "")))
    try:
        for subject in ("cairn.study.*.admin.>", "cairn.study.gamma.admin.>", "cairn.>"):
            await outsider.nc.subscribe(subject, cb=note)
        for subject in ("cairn.study.*.admin.>", "cairn.study.gamma.admin.>", "cairn.>"):
            assert await outsider.wait_refused(f'subscription to "{subject}"'), subject
        boss = await admin_of(fed, "alpha", actor="admin@coord")
        try:
            from cairn.events import StudyAdmin
            await boss.study_create("gamma", ["site-a"], [StudyAdmin(
                name="admin@coord", org="coord", role="lead")])
        finally:
            await boss.close()
        gamma = await admin_of(fed, "gamma", actor="admin@coord")
        try:
            from tests.integration.cp_helpers import rewrite_runtime
            await rewrite_runtime(fed, "site-a", {
                "alpha": {"limits": {"cpus": 4, "memory": "8Gi"}},
                "gamma": {"limits": {"cpus": 4, "memory": "8Gi"}}})
            job = await gamma.submit(write_job(tmp_path / "job", roles="""\
                roles:
                  client:
                    entrypoint: python main.py
                    sites: [site-a]
                    resources: {cpus: 1, memory: 256Mi}
                """))
            assert (await gamma.wait(job, timeout=90)).state == "completed"
        finally:
            await gamma.close()
        assert outsider.received == []
    finally:
        await outsider.close()
