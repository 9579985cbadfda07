"""The control plane end to end: real nats-server, coordinator, agents, launchers, processes.

The tests that change nothing in the federation (a job that completes, specs and names
refused before anything runs) share one federation (`shared`); those that rewrite a site's
study_runtime.yaml or create a study get their own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn import events as ev
from cairn.client import Client
from cairn.errors import InvalidInput, InvalidName, NotFound, PermissionDenied
from cairn.events import StudyAdmin
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.federation import connect, make_federation, running, session
from tests.integration.cp_helpers import (
    ONLY_SITE_A,
    default_policy,
    rewrite_runtime,
    study_events,
    write_job,
)


async def test_two_site_job_completes_and_replay_equals_live(shared: Client,
                                                             job_dir: Path) -> None:
    client = shared
    job_id = await client.submit(write_job(job_dir))
    final = await client.wait(job_id, timeout=30)
    assert final.state == "completed", final
    assert sorted(w.site for w in final.workers.values()) == ["site-a", "site-b"]
    assert all(w.state == "exited" and w.exit_code == 0 for w in final.workers.values())
    # Each worker printed its environment: the contract is there.
    chunks = [c async for c in client.logs(job_id)]
    printed = [json.loads(line) for c in chunks for line in c.data.decode().splitlines()
               if line.startswith("{")]
    assert {p["CAIRN_SITE"] for p in printed} == {"site-a", "site-b"}
    for p in printed:
        assert p["CAIRN_JOB"] == job_id and p["CAIRN_STUDY"] == "demo"
        assert p["CAIRN_ROLE"] == "client" and {"CAIRN_NATS_URL", "CAIRN_WORKDIR",
                                                 "CAIRN_DATA", "CAIRN_RANK"} <= set(p)
    view, timeline = await client.replay(job=job_id)
    assert view.jobs[job_id] == await client.job(job_id)
    assert timeline, "the replay prints a timeline"


async def _rejected(client: Client, job_dir: Path, extra: str = "",
                    roles: str | None = None) -> tuple[str, object]:
    job_id = await client.submit(write_job(job_dir, extra=extra, roles=roles))
    final = await client.wait(job_id, timeout=120)
    return job_id, final


async def test_unapproved_image_is_rejected(federation: EmbeddedFederation, client: Client,
                                            job_dir: Path) -> None:
    policy = default_policy(federation, "site-a")
    policy["images"] = {"approved": ["registry.site-a/*"]}
    await rewrite_runtime(federation, "site-a", {"demo": policy})
    job_id, final = await _rejected(client, job_dir, extra="image: evil.example/miner:1\n")
    assert final.state == "failed" and final.cause == "image-not-approved"  # type: ignore[attr-defined]
    rejected = [e for e in await study_events(federation, job=job_id)
                if isinstance(e, ev.DeploymentRejected)]
    at_a = [r for r in rejected if r.site == "site-a"]
    assert at_a and at_a[0].reason == "image-not-approved"
    assert "evil.example" in at_a[0].message and "registry.site-a/*" in at_a[0].message


async def test_request_over_study_limit_is_rejected(federation: EmbeddedFederation,
                                                    client: Client, job_dir: Path) -> None:
    policy = default_policy(federation, "site-b")
    policy["limits"] = {"cpus": 1, "memory": "8Gi", "concurrent_jobs": 4}
    await rewrite_runtime(federation, "site-b", {"demo": policy})
    roles = """\
        roles:
          client:
            entrypoint: python main.py
            resources: {cpus: 2, memory: 256Mi}
        """
    job_id, final = await _rejected(client, job_dir, roles=roles)
    assert final.state == "failed" and final.cause == "over-study-limit"  # type: ignore[attr-defined]
    rejected = [e for e in await study_events(federation, job=job_id)
                if isinstance(e, ev.DeploymentRejected)]
    assert [r.site for r in rejected] == ["site-b"] and "cpu" in rejected[0].message.lower()


async def test_study_missing_from_runtime_file_is_rejected(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    await rewrite_runtime(federation, "site-a", {"other": default_policy(federation, "site-a")})
    job_id, final = await _rejected(client, job_dir)
    assert final.state == "failed" and final.cause == "site-policy"  # type: ignore[attr-defined]
    rejected = [e for e in await study_events(federation, job=job_id)
                if isinstance(e, ev.DeploymentRejected)]
    assert "study_runtime.yaml" in rejected[0].message


@pytest.mark.parametrize("extra, field", [
    ("mounts: [/etc]\n", "mounts"),
    ("params: {db_password: hunter2}\n", "params.db_password"),
])
async def test_spec_with_host_path_or_secret_is_refused(shared: Client, job_dir: Path,
                                                       extra: str, field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        await shared.submit(write_job(job_dir, extra=extra))
    assert info.value.field == field and info.value.file and info.value.line


@pytest.mark.parametrize("bad", ["s1.>", "*", "A", "a.b", ""])
async def test_bad_names_are_refused(shared: Client, job_dir: Path, bad: str) -> None:
    with pytest.raises(InvalidName):
        await shared.study_create(bad, ["site-a"], [])
    with pytest.raises((InvalidName, InvalidInput)):
        await shared.submit(write_job(job_dir, name=json.dumps(bad)))
    with pytest.raises(InvalidName):
        await shared.study_add_site(bad)


async def test_study_isolation(federation: EmbeddedFederation, client: Client,
                               job_dir: Path) -> None:
    await client.study_create("other", ["site-a"], [StudyAdmin(name="eve@org-site-a",
                                                               org="org-site-a", role="lead")])
    other = await connect(federation, study="other", actor="eve@org-site-a")
    try:
        job_b = await other.submit(write_job(job_dir, name="secret-b"))
        assert (await other.wait(job_b, timeout=30)).state in ("completed", "failed")
        # A session of study demo sees none of it.
        assert job_b not in {j.job for j in await client.jobs()}
        with pytest.raises(NotFound):
            await client.job(job_b)
        with pytest.raises(NotFound):
            await client.cancel(job_b)
        # And the other study's session sees only its own sites.
        assert [s.name for s in await other.sites()] == ["site-a"]
    finally:
        await other.close()


async def test_a_held_queue_dispatches_nothing_until_released(tmp_path: Path,
                                                               job_dir: Path) -> None:
    """A project admin holds a study's queue: a job submitted meanwhile is queued with the
    hold as its reason and dispatched only after the release (in the stream's own order),
    at once: the coordinator's periodic look at queued jobs is an hour apart here. A lead
    of the study may submit but not release it."""
    fed = make_federation(tmp_path)
    fed.hub_options = {**fed.hub_options, "tick_s": "3600"}
    async with running(fed) as federation, session(federation) as client:
        await _held_queue(federation, client, job_dir)


async def _held_queue(federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    await client.study_create("held", ["site-a"], [StudyAdmin(name="eve@org-site-a",
                                                              org="org-site-a", role="lead")])
    admin = await connect(federation, study="held")
    lead = await connect(federation, study="held", actor="eve@org-site-a")
    try:
        state = await admin.study_hold(True, "maintenance")
        assert (state.held, state.hold_reason) == (True, "maintenance")
        assert (await admin.study_hold(True, "again")).hold_reason == "maintenance"
        with pytest.raises(PermissionDenied):
            await lead.study_hold(False)
        job = await lead.submit(write_job(job_dir, roles=ONLY_SITE_A))
        async for entry in lead.events(follow=True, poll=0.05, job=job, timeout=60):
            if entry.type in ("job.queued", "job.dispatched"):  # the coordinator decided
                break
        assert (await lead.job(job)).state == "queued"
        assert not (await admin.study_hold(False)).held
        # Dispatched now (site-a's runtime file does not name this study, so it ends there).
        assert (await lead.wait(job, timeout=60)).dispatched_at is not None
        events = await study_events(federation, "held")
        order = [(type(e).__name__, getattr(e, "held", None)) for e in events]
        queued = next(e for e in events if isinstance(e, ev.JobQueued) and e.job == job)
        assert queued.reasons == {"study": "the study's queue is held: maintenance"}
        assert order.index(("StudyHold", False)) < order.index(("JobDispatched", None))
        assert order.count(("StudyHold", True)) == 1  # holding a held queue changes nothing
    finally:
        await admin.close()
        await lead.close()
