"""Defence in depth at the launcher: a launch request that names a host path, a secret
source or an entrypoint no deploy command asked for is refused, even when it arrives on the
launch subject from an authenticated identity (here the hub, which the broker lets write
there), and nothing runs. With no deploy command of its launch id behind it, it is no launch
of this site: dead-lettered, and nothing is said in any job's name. (What a request may take
from study_runtime.yaml is checked too: tests/unit/test_launchguard.py.)"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from cairn import subjects
from cairn.bus import replay
from cairn.events import DatasetMount, DeadLettered, WorkerExited
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.security_helpers import forged_launch, watch


@pytest.mark.parametrize("change", [
    {},  # an entrypoint no deploy command asked for
    {"datasets": {"shared": DatasetMount(source="/", mode="rw")}},
    {"secret_refs": {"TOKEN": "file:/etc/shadow"}},
    {"study": "validation"},
], ids=["entrypoint", "host-path", "secret-source", "other-study-runtime"])
async def test_a_launch_the_site_did_not_accept_is_refused(
        secure_federation: EmbeddedFederation, tmp_path: Path, change: dict[str, object]) -> None:
    marker = tmp_path / "pwned"
    forged = forged_launch("j-forged1", marker, **change)
    # The site's own identity may write on its launch subject (its agent does): the
    # launcher's own checks are what stop it.
    bus = await secure_federation.bus(kit="site-a")
    hub = await secure_federation.bus()  # watches what the site may not read (dead letters)
    try:
        letters = await watch(hub, subjects.deadletter(subjects.site_stream("site-a").name))
        exits = await watch(hub, subjects.site_job_events(forged.study or "", "site-a"))
        await bus.publish(forged)
        letter = msgspec.json.decode(await letters.first(), type=DeadLettered)
    finally:
        await hub.close()
        await bus.close()
    assert letter.subject == subjects.subject_of(forged)
    assert f"no deploy command for {forged.launch_id}" in letter.error, letter.error
    assert exits.seen == [], "the forged launch was reported in a job's name"
    assert not marker.exists(), "the forged command ran"
    workers = secure_federation.site_dir("site-a") / "work" / "workers"
    assert not (workers / forged.launch_id.replace("/", "_")).exists()


async def test_an_event_whose_content_is_not_its_subjects_owner_is_dead_lettered(
        secure_federation: EmbeddedFederation, tmp_path: Path) -> None:
    """site-a may write its own job events, but one that says it is about site-b's worker
    is a forgery: the coordinator dead-letters it and the job is not failed."""
    from cairn.client import Client
    from cairn.events import DEADLETTER_DECODER, DeadLettered
    from cairn.runtime.context import Context
    from tests.integration.cp_helpers import write_job
    from tests.integration.security_helpers import connect_as

    fed = secure_federation
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
