"""A federation with a Docker site running the worker image (deploy/images/worker/): FedAvg
with real SDK workers in containers, image approval end to end, and the site's parent killed
with SIGKILL mid-job, then reconciling."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cairn import events as ev
from cairn.client import Client
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.docker import BuiltImage, DockerEngine
from tests.fixtures.federation import connect, make_federation, started
from tests.integration.cp_helpers import study_events, write_job

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "fedavg"
SITES = ("hub", "site-a", "site-b")
DOCKER_SITE = "site-a"

pytestmark = pytest.mark.slow


def docker_runtime(fed: EmbeddedFederation, image: BuiltImage) -> dict[str, Any]:
    """The Docker site's study_runtime.yaml: the worker image by default, other images of
    cairn/ only pinned by digest, host network (workers reach the bus on 127.0.0.1), the
    FedAvg data read-only."""
    shared = fed.site_dir(DOCKER_SITE) / "data" / "shared"
    return {"format": 1, "studies": {"demo": {
        "images": {"default": image.tag, "approved": ["cairn/*@sha256:*"]},
        "datasets": {"shared": {"source": str(shared.resolve()), "mode": "ro"}},
        "docker": {"network": "host"},
        "limits": {"cpus": 8, "memory": "8Gi", "concurrent_jobs": 4}}}}


@pytest.fixture(scope="module")
def federation(dockerd: DockerEngine, worker_image: BuiltImage,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFederation]:
    sys.path[:0] = [str(EXAMPLE)]
    import setup_data

    fed = make_federation(tmp_path_factory.mktemp("docker-fed"), SITES)
    fed.backends = {DOCKER_SITE: "docker"}
    fed.extra_env = {**fed.extra_env, "DOCKER_HOST": dockerd.host}
    runtime = fed.site_dir(DOCKER_SITE) / "local" / "study_runtime.yaml"
    runtime.parent.mkdir(parents=True)
    runtime.write_text(yaml.safe_dump(docker_runtime(fed, worker_image)))
    with started(fed, healthy_s=90):
        setup_data.write(fed.dir / "sites", hub=fed.hub)
        yield fed


@pytest.fixture
async def client(federation: EmbeddedFederation) -> Any:
    c = await connect(federation)
    try:
        yield c
    finally:
        await c.close()


def fedavg_job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    shutil.copytree(EXAMPLE / "app", job / "app")
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["params"].update(rounds=2, min_sites=2)
    (job / "job.yaml").write_text(yaml.safe_dump(spec))
    return job / "job.yaml"


async def test_fedavg_with_one_site_on_docker_runs_sdk_workers_from_the_worker_image(
        federation: EmbeddedFederation, client: Client, tmp_path: Path,
        worker_image: BuiltImage) -> None:
    job_id = await client.submit(fedavg_job(tmp_path))
    final = await client.wait(job_id, timeout=180)
    assert final.state == "completed", final
    [result] = [r.value for r in final.results if r.role == "server"]
    assert all(r["sites"] == ["site-a", "site-b"] for r in result["rounds"])
    events = await study_events(federation, job=job_id)
    backends = {e.site: e.backend for e in events if isinstance(e, ev.WorkerLaunching)}
    assert backends == {"hub": "process", "site-a": "docker", "site-b": "process"}
    running = next(e for e in events if isinstance(e, ev.WorkerRunning) and e.site == "site-a")
    assert running.allocation is not None and running.allocation.gpus == 0
    # The container proved its allocation: its report is in the work dir it shared.
    [report] = (federation.site_dir(DOCKER_SITE) / "work" / "workers").glob(
        f"{job_id}_site-a_client_*/.cairn/allocation.json")
    assert '"ok": true' in report.read_text()


async def test_an_unapproved_image_is_refused(federation: EmbeddedFederation,
                                              client: Client, tmp_path: Path,
                                              worker_image: BuiltImage) -> None:
    roles = """\
        roles:
          client:
            entrypoint: python main.py
            resources: {cpus: 1, memory: 128Mi}
            sites: [site-a]
        """
    # Matches no approval at all: the agent refuses the deployment.
    unapproved = await client.submit(write_job(tmp_path / "a", roles=roles,
                                               extra="image: evil.example/miner:1\n"))
    # Matches `cairn/*@sha256:*`, but the local image is other content: the launcher refuses.
    wrong = "sha256:" + "1" * 64
    mismatched = await client.submit(write_job(
        tmp_path / "b", roles=roles, extra=f"image: {worker_image.tag}@{wrong}\n"))
    for job_id in (unapproved, mismatched):
        final = await client.wait(job_id, timeout=60)
        assert final.state == "failed", final
    events = await study_events(federation, job=unapproved)
    [rejected] = [e for e in events if isinstance(e, ev.DeploymentRejected)]
    assert (rejected.site, rejected.reason) == ("site-a", "image-not-approved")
    assert "evil.example/miner:1" in rejected.message
    events = await study_events(federation, job=mismatched)
    [exited] = [e for e in events if isinstance(e, ev.WorkerExited)]
    assert exited.reason == "image-not-approved" and wrong in exited.message


async def test_the_launcher_killed_mid_job_finds_its_container_again(
        federation: EmbeddedFederation, client: Client, tmp_path: Path,
        dockerd: DockerEngine) -> None:
    script = ("import pathlib, time\ntime.sleep(5)\n"
              "pathlib.Path('finished').write_text('yes')\nprint('done')\n")
    roles = """\
        roles:
          client:
            entrypoint: python main.py
            resources: {cpus: 1, memory: 128Mi}
            sites: [site-a]
        """
    job_id = await client.submit(write_job(tmp_path, script=script, roles=roles))
    for _ in range(300):
        job = await client.job(job_id)
        if any(w.state == "running" for w in job.workers.values()):
            break
        await asyncio.sleep(0.1)
    federation.kill(f"site-{DOCKER_SITE}")  # agent and launcher, SIGKILL
    docker = dockerd.client()
    try:
        alive = docker.containers.list(filters={"label": f"cairn.job={job_id}"})
    finally:
        docker.close()
    assert len(alive) == 1, "the container outlives its launcher"
    federation.respawn(f"site-{DOCKER_SITE}")
    final = await client.wait(job_id, timeout=90)
    assert final.state == "completed", final
    events = await study_events(federation, job=job_id)
    assert len([e for e in events if isinstance(e, ev.WorkerLaunching)]) == 1, (
        "nothing is launched twice")
    [exited] = [e for e in events if isinstance(e, ev.WorkerExited)]
    assert exited.exit_code == 0
    [workdir] = (federation.site_dir(DOCKER_SITE) / "work" / "workers").glob(f"{job_id}_*")
    assert (workdir / "finished").read_text() == "yes"
    assert "done" in (workdir / "worker.log").read_text()
