"""One federation, four platforms: one job runs at once across a process site, a Docker site
(the worker image on a private engine), a Slurm site (the two-node lab cluster, CLI driver)
and a Kubernetes site (kmock: the test plays the kubelet and drives the pod's phase)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("kubernetes", reason="pip install -e '.[kubernetes]' (the official client)")
pytest.importorskip("kmock", reason="pip install -e '.[dev]' (kmock: the test API)")

from kubernetes import client as k8s  # noqa: E402

from cairn import events as ev  # noqa: E402
from cairn.runtime.embedded import EmbeddedFederation  # noqa: E402
from tests.fixtures.docker import BuiltImage, DockerEngine  # noqa: E402
from tests.fixtures.federation import connect, make_federation  # noqa: E402
from tests.fixtures.slurm_lab import SlurmLab  # noqa: E402
from tests.integration.cp_helpers import study_events, write_job  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SITES = ("hub", "site-p", "site-d", "site-s", "site-k")
BACKENDS = {"site-p": "process", "site-d": "docker", "site-s": "slurm", "site-k": "kubernetes"}
NS = "fourway"
K8S_IMAGE = "registry.site-k/cairn-worker:1.0"
WAIT_S = 120.0
# Every worker writes where it ran and on what; the Kubernetes pod's "run" is the test.
SCRIPT = """\
import os, pathlib, sys
marker = pathlib.Path(os.environ["CAIRN_WORKDIR"]) / "ran-here"
marker.write_text(os.environ["CAIRN_SITE"] + " " + os.environ["CAIRN_RANK"])
print("ran at", os.environ["CAIRN_SITE"], "rank", os.environ["CAIRN_RANK"], flush=True)
"""
ROLES = """\
    roles:
      client:
        entrypoint: python main.py
        resources: {cpus: 1, memory: 256Mi}
        sites: [site-p, site-d, site-s, site-k]
        min_sites: 4
    """


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "cairn", "user": {}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "cairn"}}]}))
    return path


def runtime(fed: EmbeddedFederation, site: str, study: dict[str, Any]) -> None:
    path = fed.site_dir(site) / "local" / "study_runtime.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    base = {"env": {"TZ": "UTC"}, "limits": {"cpus": 4, "memory": "4Gi", "concurrent_jobs": 2}}
    path.write_text(yaml.safe_dump({"format": 1, "studies": {"demo": {**base, **study}}}))


def four_platforms(tmp_path: Path, dockerd: DockerEngine, image: BuiltImage, lab: SlurmLab,
                   kube_url: str) -> EmbeddedFederation:
    fed = make_federation(tmp_path, SITES)
    fed.backends.update(BACKENDS)
    fed.extra_env.update({"DOCKER_HOST": dockerd.host,
                          "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", kube_url))})
    fed.site_options.update({"snapshot_initial_delay_s": "3600"})
    fed.site_settings.update({
        "site-s": {"slurm": {"driver": "cli", "slurm_conf": str(lab.conf), "poll": 0.2}},
        # The job's code reaches its pod through a shared claim (docs/sites/kubernetes.md).
        "site-k": {"kubernetes": {"workdir_claim": "cairn-work"}}})
    runtime(fed, "site-d", {"images": {"default": image.tag}, "docker": {"network": "host"}})
    runtime(fed, "site-k", {"images": {"default": K8S_IMAGE},
                            "kubernetes": {"namespace": NS, "service_account": "cairn-worker",
                                           "pending_timeout": "10m"}})
    return fed


class Kubelet:
    """What a kubelet would do for the one pod: the test sets its phases."""

    def __init__(self, url: str) -> None:
        configuration = k8s.Configuration()
        configuration.host = url
        self.core = k8s.CoreV1Api(k8s.ApiClient(configuration))

    async def pod(self) -> dict[str, Any]:
        for _ in range(int(WAIT_S / 0.1)):
            found = await asyncio.to_thread(self.core.list_namespaced_pod, NS,
                                            _preload_content=False, _request_timeout=10)
            items = json.loads(found.data)["items"]
            if items:
                return dict(items[0])
            await asyncio.sleep(0.1)
        raise AssertionError("the launcher created no pod")

    async def run_to_success(self, name: str) -> None:
        for status in ({"phase": "Running"},
                       {"phase": "Succeeded", "containerStatuses": [
                           {"name": "worker", "state": {"terminated": {"exitCode": 0}}}]}):
            await asyncio.to_thread(self.core.patch_namespaced_pod_status, name, NS,
                                    {"status": status}, _preload_content=False,
                                    _request_timeout=10)


async def test_one_job_runs_on_process_docker_slurm_and_kubernetes_at_once(
        tmp_path: Path, dockerd: DockerEngine, worker_image: BuiltImage, slurm_lab: SlurmLab,
        kmock: Any) -> None:
    kmock["get", kmock.resource("", "v1", "pods"), kmock.subresource("log")] << (
        b"ran at site-k\n")
    url = str(kmock.url).rstrip("/")
    fed = four_platforms(tmp_path, dockerd, worker_image, slurm_lab, url)
    kubelet = Kubelet(url)
    fed.start()
    try:
        await fed.wait_healthy(90)
        client = await connect(fed)
        try:
            job_id = await client.submit(write_job(tmp_path / "job", script=SCRIPT,
                                                   roles=ROLES))
            try:
                pod = await kubelet.pod()
            except AssertionError:
                job = await client.job(job_id)
                raise AssertionError(f"no pod; the job is {job}") from None
            # The three other platforms run their worker for real, meanwhile.
            workdirs = {site: fed.site_dir(site) / "work" / "workers"
                        for site in ("site-p", "site-d", "site-s")}
            for _ in range(int(WAIT_S / 0.1)):
                if all(list(w.glob(f"{job_id}_*/ran-here")) for w in workdirs.values()):
                    break
                await asyncio.sleep(0.1)
            job = await client.job(job_id)
            assert not job.terminal, "the job waits for its Kubernetes worker"
            await kubelet.run_to_success(pod["metadata"]["name"])
            final = await client.wait(job_id, timeout=WAIT_S)
            log = b"".join([c.data async for c in client.logs(job_id)]).decode()
        finally:
            await client.close()
        events = await study_events(fed, job=job_id)
    finally:
        fed.stop()
    assert final.state == "completed", (final, log)
    launching = {e.site: e.backend for e in events if isinstance(e, ev.WorkerLaunching)}
    assert launching == BACKENDS
    exited = {e.site: (e.exit_code, e.reason) for e in events if isinstance(e, ev.WorkerExited)}
    assert exited == {site: (0, None) for site in BACKENDS}
    for site, folder in workdirs.items():
        [marker] = folder.glob(f"{job_id}_*/ran-here")
        assert marker.read_text().split()[0] == site
    for site in ("site-p", "site-d", "site-s", "site-k"):
        assert f"ran at {site}" in log, log
    assert pod["spec"]["containers"][0]["image"] == K8S_IMAGE
