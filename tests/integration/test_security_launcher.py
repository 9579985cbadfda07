"""Defence in depth at the launcher: a launch request that names a host path, a secret
source or an entrypoint the site did not accept is refused, even when it arrives on the
launch subject from an authenticated identity (here the hub, which the broker lets write
there), and nothing runs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cairn import subjects
from cairn.bus import replay
from cairn.events import STUDY_DECODER, DatasetMount, LaunchRequested, WorkerExited
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.federation import make_federation


@pytest.fixture
async def secure_fed(tmp_path: Path) -> AsyncIterator[EmbeddedFederation]:
    fed = make_federation(tmp_path)
    fed.secure = True
    fed.start()
    try:
        await fed.wait_healthy(60)
        yield fed
    finally:
        fed.stop()


def _forged(n: int, marker: Path, **changes: object) -> LaunchRequested:
    job = f"j-forged{n}"
    fields: dict[str, object] = {
        "id": f"forged-{n}", "at": "2026-01-01T00:00:00Z", "study": "demo",
        "source": "agent@site-a", "launch_id": f"{job}/site-a/client/0/0", "job": job,
        "site": "site-a", "role": "client", "entrypoint": f"touch {marker}"}
    fields.update(changes)
    import msgspec

    return msgspec.convert(fields, LaunchRequested)


async def _exit_of(fed: EmbeddedFederation, launch_id: str, timeout: float = 30,
                   study: str = "demo") -> WorkerExited:
    """The launcher's `worker.exited` for a launch, in the study the request named."""
    bus = await fed.bus()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            async for item in replay(bus, subjects.study_stream(study).name, STUDY_DECODER,
                                     filters=[subjects.site_job_events(study, "site-a",
                                                                       "exited")]):
                if isinstance(item.event, WorkerExited) and item.event.launch_id == launch_id:
                    return item.event
            await asyncio.sleep(0.1)
    finally:
        await bus.close()
    raise AssertionError(f"no worker.exited for {launch_id}")


@pytest.mark.parametrize("change", [
    {},  # an entrypoint no deploy command asked for
    {"datasets": {"shared": DatasetMount(source="/", mode="rw")}},
    {"secret_refs": {"TOKEN": "file:/etc/shadow"}},
    {"study": "validation"},
], ids=["entrypoint", "host-path", "secret-source", "other-study-runtime"])
async def test_a_launch_the_site_did_not_accept_is_refused(
        secure_fed: EmbeddedFederation, tmp_path: Path, change: dict[str, object]) -> None:
    marker = tmp_path / "pwned"
    forged = _forged(1, marker, **change)
    bus = await secure_fed.bus()
    try:
        await bus.publish(forged)
    finally:
        await bus.close()
    # Refused; its exit is reported in the study it named (another study's runtime grants
    # nothing to demo's deployments, and validation's has no such entrypoint).
    exited = await _exit_of(secure_fed, forged.launch_id, study=forged.study or "demo")
    assert exited.reason == "launch-failed", exited
    assert not marker.exists(), "the forged command ran"


async def test_an_event_whose_content_is_not_its_subjects_owner_is_dead_lettered(
        secure_fed: EmbeddedFederation, tmp_path: Path) -> None:
    """site-a may write its own job events, but one that says it is about site-b's worker
    is a forgery: the coordinator dead-letters it and the job is not failed."""
    import msgspec

    from cairn.client import Client
    from cairn.events import DEADLETTER_DECODER, DeadLettered
    from cairn.runtime.context import Context
    from tests.integration.cp_helpers import write_job
    from tests.integration.security_helpers import connect_as

    fed = secure_fed
    assert fed.nats is not None and fed.trust is not None
    client = await Client.connect(Context(nats_url=fed.nats.url, study="demo",
                                          **fed.client_options()))
    site_a = await connect_as(fed, fed.trust.creds("site-a"))
    try:
        job = await client.submit(write_job(tmp_path / "job", script="import time\n"
                                            "time.sleep(2)\n"))
        forged = msgspec.convert({
            "type": "worker.exited", "id": "forged-exit", "at": "2026-01-01T00:00:00Z",
            "study": "demo", "source": "launcher@site-b", "job": job, "site": "site-b",
            "role": "client", "launch_id": f"{job}/site-b/client/0/0", "exit_code": 1,
            "reason": "crashed"}, WorkerExited)
        subject = subjects.job_site("demo", job, "site-a", "exited")  # site-a's own subject
        await site_a.nc.publish(subject, msgspec.json.encode(forged))
        await site_a.nc.flush(timeout=5)
        final = await client.wait(job, timeout=60)
        assert final.state == "completed", final.cause
        bus = await fed.bus()
        try:
            letters = [r.event async for r in replay(bus, subjects.DEADLETTER_STREAM.name,
                                                     DEADLETTER_DECODER)
                       if isinstance(r.event, DeadLettered) and r.event.subject == subject]
        finally:
            await bus.close()
        assert letters and "not its owner's subject" in letters[0].error
    finally:
        await site_a.close()
        await client.close()
