"""One federation, four platforms: one job runs at once across a process site, a Docker site
(the worker image on a private engine), a Slurm site (the two-node lab cluster, CLI driver)
and a Kubernetes site (kmock: the test plays the kubelet: it runs the pod's container command
with the pod's environment in the folder its work claim maps to, drives the pod's phase, and
serves what the command printed as the pod's log)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
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
# Every worker writes where it ran and on what.
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
    """What a kubelet would do for the one pod: run it, set its phases, keep its log."""

    def __init__(self, url: str) -> None:
        configuration = k8s.Configuration()
        configuration.host = url
        self.core = k8s.CoreV1Api(k8s.ApiClient(configuration))
        self.logs: dict[str, bytes] = {}
        """The output of each pod this kubelet ran, served as the pod's log."""

    def log_of(self, request: Any) -> bytes:
        return self.logs.get(str(request.name), b"")

    async def pod(self) -> dict[str, Any]:
        for _ in range(int(WAIT_S / 0.1)):
            found = await asyncio.to_thread(self.core.list_namespaced_pod, NS,
                                            _preload_content=False, _request_timeout=10)
            items = json.loads(found.data)["items"]
            if items:
                return dict(items[0])
            await asyncio.sleep(0.1)
        raise AssertionError("the launcher created no pod")

    async def run(self, pod: dict[str, Any], work_root: Path) -> None:
        """Run the pod's worker container here: its command line and environment, in the
        folder its `cairn-work` mount's subPath names under the claim (`work_root`), then
        record how it ended in the pod's status."""
        name = pod["metadata"]["name"]
        [container] = [c for c in pod["spec"]["containers"] if c["name"] == "worker"]
        command = [*container["command"], *(container.get("args") or [])]
        if command[0] == "python":
            command[0] = sys.executable  # the image's python, on this host
        [mount] = [m for m in container["volumeMounts"] if m["name"] == "cairn-work"]
        folder = work_root / mount["subPath"]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        env["CAIRN_WORKDIR"] = str(folder)  # the mount, as this host sees it
        await self._status(name, {"phase": "Running"})
        done = await asyncio.to_thread(subprocess.run, command, cwd=folder, env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       timeout=60, check=False)
        self.logs[name] = done.stdout
        await self._status(name, {
            "phase": "Succeeded" if done.returncode == 0 else "Failed",
            "containerStatuses": [{"name": "worker", "state": {
                "terminated": {"exitCode": done.returncode}}}]})

    async def _status(self, name: str, status: dict[str, Any]) -> None:
        await asyncio.to_thread(self.core.patch_namespaced_pod_status, name, NS,
                                {"status": status}, _preload_content=False,
                                _request_timeout=10)


async def test_one_job_runs_on_process_docker_slurm_and_kubernetes_at_once(
        tmp_path: Path, dockerd: DockerEngine, worker_image: BuiltImage, slurm_lab: SlurmLab,
        kmock: Any) -> None:
    url = str(kmock.url).rstrip("/")
    fed = four_platforms(tmp_path, dockerd, worker_image, slurm_lab, url)
    kubelet = Kubelet(url)
    kmock["get", kmock.resource("", "v1", "pods"), kmock.subresource("log")] << kubelet.log_of
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
            await kubelet.run(pod, fed.site_dir("site-k") / "work")
            workdirs["site-k"] = fed.site_dir("site-k") / "work" / "workers"
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
    ranks = {w.site: w.rank for w in final.workers.values()}
    for site, folder in workdirs.items():
        [marker] = folder.glob(f"{job_id}_*/ran-here")
        assert marker.read_text() == f"{site} {ranks[site]}"
    # Each site's own output, as its launcher captured it (the pod's from the log API).
    for site in ("site-p", "site-d", "site-s", "site-k"):
        assert f"ran at {site} rank {ranks[site]}" in log, log
    assert pod["spec"]["containers"][0]["image"] == K8S_IMAGE
