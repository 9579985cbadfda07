"""Consumers belong to their owner: no site, admin or worker can pull from, ack, inspect or
delete another identity's consumer, nor read another job through one; a worker writes and
reads only its own job's files; a service whose consumer is deleted makes it again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from cairn import subjects
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.cp_helpers import release_workers, write_job
from tests.integration.insiders import admin_of, insiders, kit, wait_for, worker_creds
from tests.integration.security_helpers import Probe, connect_as, js_allowed
from tests.integration.test_insider_events import WAIT_FOR_MARKER

__all__ = ["insiders"]
JS = "$JS.API"


def _job(tmp_path: Path, name: str) -> Path:
    return write_job(tmp_path / name, name=name, script=WAIT_FOR_MARKER, roles="""\
        roles:
          client:
            entrypoint: python main.py
            sites: [site-a]
            resources: {cpus: 1, memory: 256Mi}
        """)


async def _refused(probe: Probe, subject: str, payload: bytes = b"{}") -> bool:
    return not await js_allowed(probe, subject, payload)


async def _consumers(fed: EmbeddedFederation, stream: str) -> set[str]:
    bus = await fed.bus()
    try:
        return {c.name for c in await bus.js.consumers_info(stream)}
    finally:
        await bus.close()


async def test_no_one_touches_anothers_consumers_or_job(insiders: EmbeddedFederation,
                                                       tmp_path: Path) -> None:
    fed = insiders
    alpha = await admin_of(fed, "alpha")
    try:
        job = await alpha.submit(_job(tmp_path, "mine"))
        other = await alpha.submit(_job(tmp_path, "theirs"))

        async def running() -> bool:
            return (await alpha.job(job)).state == "running"
        await wait_for(running, "the job runs")
        stream = subjects.study_stream("alpha").name
        before = await _consumers(fed, stream)
        assert {"coordinator", "agent-site-a", "agent-site-c"} <= before

        site = await connect_as(fed, kit(fed, "site-a"))
        try:
            pull = json.dumps({"batch": 50, "expires": 1_000_000_000}).encode()
            assert await _refused(site, f"{JS}.CONSUMER.MSG.NEXT.{stream}.coordinator", pull)
            assert await _refused(site, f"$JS.ACK.{stream}.coordinator.1.1.1.1.1.1", b"+ACK")
            assert await _refused(site, f"{JS}.CONSUMER.DELETE.{stream}.coordinator")
            assert await _refused(site, f"{JS}.CONSUMER.INFO.{stream}.agent-site-c")
            assert await _refused(site, f"{JS}.CONSUMER.CREATE.{stream}.coordinator")
            # The create form whose body may name any consumer is not a site's.
            assert await _refused(site, f"{JS}.CONSUMER.CREATE.{stream}")
        finally:
            await site.close()

        worker = await connect_as(fed, worker_creds(fed, tmp_path, study="alpha", job=job,
                                                    site="site-a"))
        try:
            for name in ("coordinator", "agent-site-c", "agent-site-a"):
                assert await _refused(worker, f"{JS}.CONSUMER.DELETE.{stream}.{name}")
            theirs = subjects.job_all("alpha", other)
            assert await _refused(worker, f"{JS}.CONSUMER.CREATE.{stream}.w_0.{theirs}")
            await worker.nc.subscribe(theirs)
            assert await worker.wait_refused(f'subscription to "{theirs}"')
            digest = "a" * 64
            assert await _refused(worker, "$O.artifacts_alpha.M.YWJj")
            assert await _refused(worker, "$O.artifacts_alpha.C.abc")
            assert await _refused(worker, f"cairn.files.alpha.{other}.{digest}.m")
            assert not await _refused(worker, f"cairn.files.alpha.{job}.{digest}.c.x")
            # Another job's data-plane payloads are as closed to it as its results.
            files = subjects.files_stream("alpha").name
            payload = f"cairn.files.alpha.{other}.p.{digest}"
            assert await _refused(worker, f"{payload}.m")
            assert await _refused(worker, f"{JS}.CONSUMER.CREATE.{files}.w_0.{payload}.c.x")
            assert await _refused(worker, f"{JS}.DIRECT.GET.{files}.{payload}.m")
            assert not await _refused(worker, f"cairn.files.alpha.{job}.p.{digest}.c.x")
        finally:
            await worker.close()

        assert await _consumers(fed, stream) >= before
        for j in (job, other):
            release_workers(fed, j)
        for j in (job, other):
            final = await alpha.wait(j, timeout=90)
            assert final.state == "completed", final.cause
    finally:
        await alpha.close()


async def test_a_deleted_durable_consumer_is_made_again_and_resumes(
        insiders: EmbeddedFederation, tmp_path: Path) -> None:
    fed = insiders
    alpha = await admin_of(fed, "alpha")
    try:
        first = await alpha.submit(write_job(tmp_path / "one", name="one"))
        assert (await alpha.wait(first, timeout=90)).state == "completed"
        stream = subjects.study_stream("alpha").name
        bus = await fed.bus()
        try:
            await bus.js.delete_consumer(stream, "coordinator")
        finally:
            await bus.close()
        second = await alpha.submit(write_job(tmp_path / "two", name="two"))
        final = await alpha.wait(second, timeout=90)
        assert final.state == "completed", final.cause
        assert "coordinator" in await _consumers(fed, stream)
        log = fed.process("coordinator").log

        async def reported() -> bool:
            return "consumer coordinator on STUDY_alpha had disappeared" in log.read_text()
        await wait_for(reported, "the coordinator says it made its consumer again")
        bus = await fed.bus()
        try:
            health = json.loads(await bus.request(subjects.health("coordinator", "hub"), b""))
        finally:
            await bus.close()
        assert health["consumers_recreated"] >= 1, health
        # Resumed where it was: the first job's events were not handled twice.
        assert (await alpha.job(first)).state == "completed"
        await asyncio.sleep(0)
    finally:
        await alpha.close()
