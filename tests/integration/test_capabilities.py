"""Backend capabilities mean something: each launcher declares what its backend can do, and the
agent refuses a deployment its site's backend cannot run, naming the capability and the
backend, before anything is launched."""

from __future__ import annotations

from pathlib import Path

from cairn import events as ev
from cairn import subjects
from cairn.bus import replay
from cairn.client import Client
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.cp_helpers import default_policy, rewrite_runtime, study_events, write_job


async def test_each_launcher_declares_its_backend(federation: EmbeddedFederation) -> None:
    assert federation.nats is not None
    bus = await federation.bus()
    try:
        declared = {r.event.site: r.event async for r in replay(
            bus, subjects.FEDERATION_STREAM.name, ev.FEDERATION_DECODER,
            filters=[subjects.site_event(site, "backend") for site in federation.sites])
            if isinstance(r.event, ev.BackendDeclared)}
    finally:
        await bus.close()
    assert set(declared) == set(federation.sites)
    for event in declared.values():
        assert event.backend == "process"
        assert {"cancel", "reconcile"} <= set(event.capabilities)
        assert "containers" not in event.capabilities


async def test_an_image_on_a_process_backend_is_refused_naming_what_is_missing(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    for site in ("site-a", "site-b"):
        policy = default_policy(federation, site)
        policy["images"] = {"approved": ["lab/*"]}  # the policy would let it run
        await rewrite_runtime(federation, site, {"demo": policy})
    job_id = await client.submit(write_job(job_dir, extra="image: lab/trainer:1\n"))
    final = await client.wait(job_id, timeout=60)
    assert final.state == "failed" and final.cause == "site-policy", final
    rejected = [e for e in await study_events(federation, job=job_id)
                if isinstance(e, ev.DeploymentRejected)]
    assert {r.site for r in rejected} == {"site-a", "site-b"}
    for r in rejected:
        assert r.missing_capability == "containers"
        assert "process backend" in r.message and "lab/trainer:1" in r.message
    launched = [e for e in await study_events(federation, job=job_id)
                if isinstance(e, ev.WorkerLaunching | ev.DeploymentAccepted)]
    assert launched == []
