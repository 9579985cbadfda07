"""A launch runs exactly its deploy command, once, and a launch that can never be reported
does not wedge the launcher. The attacker is site-a's own identity (a probe with site-a's
credential), which the broker lets write on site-a's launch subject, on a real secure
embedded federation."""

from __future__ import annotations

import base64
from pathlib import Path

import msgspec

from cairn import subjects
from cairn.bus import Bus, replay
from cairn.client import Client
from cairn.events import (
    FEDERATION_DECODER,
    SITE_DECODER,
    STUDY_DECODER,
    DeadLettered,
    LaunchRequested,
    RecordSkipped,
    encode,
)
from cairn.events import decode as decode_event
from cairn.launcher.records import LaunchRecord, kv_key
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.cli_run import wait_for_lines
from tests.integration.cp_helpers import ONLY_SITE_A, dead_letters, write_job
from tests.integration.security_helpers import connect_as, forged_launch, watch

HELD = '''\
import json, os, pathlib, time
params = json.loads(os.environ["CAIRN_PARAMS"])
with open(params["starts"], "a") as f:
    f.write(os.environ["CAIRN_JOB"] + " " + json.dumps(params, sort_keys=True) + "\\n")
release = pathlib.Path(params["release"])
for _ in range(1200):  # held until the test releases it, 120 s at most
    if release.exists():
        break
    time.sleep(0.1)
'''


async def _launch_of(bus: Bus, job: str) -> LaunchRequested:
    launches = [r.event async for r in replay(bus, subjects.site_stream("site-a").name,
                                              SITE_DECODER)
                if isinstance(r.event, LaunchRequested) and r.event.job == job]
    assert len(launches) == 1, launches
    return launches[0]


async def _as_site_a(fed: EmbeddedFederation, *events: LaunchRequested) -> None:
    assert fed.trust is not None
    probe = await connect_as(fed, fed.trust.creds("site-a"))
    try:
        for event in events:
            await probe.nc.publish(subjects.subject_of(event), encode(event),
                                   headers={"Nats-Msg-Id": event.id})
        await probe.nc.flush(timeout=5)
        assert not probe.errors, probe.errors  # the broker let site-a write there
    finally:
        await probe.close()


async def test_a_copy_of_a_real_launch_under_a_new_launch_id_is_refused(
        federation: EmbeddedFederation, client: Client, job_dir: Path, tmp_path: Path) -> None:
    """The very hole: a duplicate of a real deploy's launch with a launch id of its own, its
    params injected and 10x the timeout. It matched the real deploy command before (the
    match ignored the launch id, params and timeout), ran, and got a worker credential."""
    fed = federation
    starts, release, injected = tmp_path / "starts", tmp_path / "release", tmp_path / "pwned"
    params = f"params: {{starts: {starts}, release: {release}}}\n"
    bus = await fed.bus()
    try:
        job = await client.submit(write_job(job_dir, name="held", script=HELD, extra=params,
                                            roles=ONLY_SITE_A))
        [first] = await wait_for_lines(starts, 1)
        real = await _launch_of(bus, job)
        # A consistent copy (its launch id is its own fields', so it passes the owner
        # check every service applies) that no deploy command ever asked for.
        forged = msgspec.structs.replace(
            real, id="forged-copy", launch_id=f"{job}/site-a/client/0/7", attempt=7,
            params={**real.params, "starts": str(injected), "injected": True},
            timeout_s=real.timeout_s * 10)
        # The real launch id again, with its params injected: launched once, never twice.
        again = msgspec.structs.replace(real, id="forged-again",
                                        params={**real.params, "starts": str(injected)})
        letters = await watch(bus, subjects.deadletter(subjects.site_stream("site-a").name))
        worker_events = await watch(bus, subjects.site_job_events("demo", "site-a"))
        await _as_site_a(fed, again, forged)

        # Refused: no deploy command has its launch id. Dead-lettered, and nothing said in
        # the job's name (a launch-failed there would have failed the real worker's job).
        letter = msgspec.json.decode(await letters.first(), type=DeadLettered)
        assert letter.subject == subjects.subject_of(forged)
        assert f"no deploy command for {forged.launch_id}" in letter.error, letter.error
        assert msgspec.json.decode(base64.b64decode(letter.payload_b64))["id"] == forged.id
        # Nothing ran, nothing was given a credential: the guard refused before the worker's
        # directory (where its credential file would be) was made.
        workers = fed.site_dir("site-a") / "work" / "workers"
        assert not (workers / forged.launch_id.replace("/", "_")).exists()
        assert worker_events.seen == [], [decode_event(m) for m in worker_events.seen]
        assert not injected.exists()

        release.touch()
        final = await client.wait(job, timeout=60)
        assert final.state == "completed", final
        assert starts.read_text().splitlines() == [first], "a worker started twice"
        assert not injected.exists()
    finally:
        release.touch()
        await bus.close()


async def _reports(fed: EmbeddedFederation) -> tuple[list[DeadLettered], list[RecordSkipped]]:
    bus = await fed.bus()
    try:
        skipped = [r.event async for r in replay(bus, subjects.FEDERATION_STREAM.name,
                                                 FEDERATION_DECODER)
                   if isinstance(r.event, RecordSkipped) and r.event.service == "launcher"]
    finally:
        await bus.close()
    return await dead_letters(fed), skipped


async def _run_on_site_a(client: Client, job_dir: Path) -> None:
    job = await client.submit(write_job(job_dir, name="after", roles=ONLY_SITE_A))
    final = await client.wait(job, timeout=60)
    assert final.state == "completed", final


async def _restart_site_a(fed: EmbeddedFederation) -> None:
    fed.kill("site-site-a")
    fed.respawn("site-site-a")
    await fed.wait_healthy(60)  # raises if the parent exits (it did, with 7, before)


async def test_a_forged_launch_for_another_study_is_dead_lettered_once_and_nothing_wedges(
        federation: EmbeddedFederation, client: Client, tmp_path: Path) -> None:
    fed = federation
    await client.study_create("other", ["hub", "site-b"], [])
    marker = tmp_path / "pwned"
    forged = forged_launch("j-elsewhere", marker, study="other")  # a study site-a is not in
    # And a record of such a launch, as an earlier launcher (or a refused report) left it:
    # never started, in a study site-a is not in.
    stale = LaunchRecord(launch_id="j-stale/site-a/client/0/0", study="other",
                         job="j-stale", site="site-a", role="client")
    launch_subject = subjects.subject_of(forged)
    bus = await fed.bus()
    try:
        letters = await watch(bus, subjects.deadletter(subjects.site_stream("site-a").name))
        await _as_site_a(fed, forged)
        letter = msgspec.json.decode(await letters.first(), type=DeadLettered)
        assert letter.subject == launch_subject
        assert "'other' is not one of site site-a's studies" in letter.error, letter.error
        site_a = await fed.bus(kit="site-a")  # the site's own launch records are its to write
        try:
            launches = await site_a.js.key_value(subjects.kv_launches("site-a"))
            await launches.put(kv_key(stale.launch_id), msgspec.json.encode(stale))
        finally:
            await site_a.close()
    finally:
        await bus.close()

    # The launcher keeps serving: a real job on site-a runs.
    await _run_on_site_a(client, tmp_path / "job1")
    # A restart of the site parent comes up, with that record in its KV, and says so once.
    await _restart_site_a(fed)
    await _run_on_site_a(client, tmp_path / "job2")
    await _restart_site_a(fed)  # a second start reports nothing again
    await _run_on_site_a(client, tmp_path / "job3")

    letters_found, skipped = await _reports(fed)
    for_request = [x for x in letters_found if x.subject == launch_subject]
    bucket = subjects.kv_launches("site-a")
    for_record = [x for x in letters_found
                  if x.subject == f"$KV.{bucket}.{kv_key(stale.launch_id)}"]
    assert len(for_request) == 1 and len(for_record) == 1, letters_found
    assert "'other' is not one of site site-a's studies" in for_record[0].error
    assert sorted(s.key for s in skipped) == sorted([kv_key(stale.launch_id),
                                                     forged.launch_id]), skipped
    assert not marker.exists()
    # The stale record is done now: marked, with why.
    bus = await fed.bus()
    try:
        launches = await bus.js.key_value(bucket)
        entry = await launches.get(kv_key(stale.launch_id))
        assert entry.value is not None
        marked = msgspec.json.decode(entry.value, type=LaunchRecord)
        assert marked.state == "exited" and "not one of site site-a's studies" in \
            marked.dead_lettered
        # Nothing was ever reported into study `other` by site-a.
        reported = [r.event async for r in replay(bus, subjects.study_stream("other").name,
                                                  STUDY_DECODER)
                    if getattr(r.event, "site", None) == "site-a"]
        assert reported == []
    finally:
        await bus.close()

