"""End to end on a Kubernetes site: coordinator, agent and the real launcher service (its
own process) against kmock. The test plays the kubelet: the pod phases it sets drive the job.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("kubernetes", reason="pip install -e '.[kubernetes]' (the official client)")
kmock = pytest.importorskip("kmock", reason="pip install -e '.[dev]' (kmock: the test API)")

from kubernetes import client as k8s  # noqa: E402

from cairn import events as ev  # noqa: E402
from cairn.api import JobRequest  # noqa: E402
from cairn.client import Client  # noqa: E402
from cairn.events import Resources, RoleRequest  # noqa: E402
from cairn.runtime.embedded import EmbeddedFederation  # noqa: E402
from tests.fixtures.federation import connect, make_federation  # noqa: E402
from tests.integration.cp_helpers import study_events  # noqa: E402

NS = "lung"
IMAGE = "registry.site-k/cairn-worker:1.0"
WAIT_S = 60.0
KUBELET = "kubelet-played-by-the-test"


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "cairn", "user": {}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "cairn"}}]}))
    return path


def federation(tmp_path: Path, url: str, pending_timeout: str = "10m") -> EmbeddedFederation:
    make_federation(tmp_path)  # skips where there is no nats-server
    fed = EmbeddedFederation(
        dir=tmp_path / "fed", sites=("hub", "site-k"), heartbeat_s=0.2,
        backends={"site-k": "kubernetes"},
        # No kubernetes: section in site.yaml: the launcher finds the cluster as kubectl does.
        extra_env={"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", url))},
        site_options={"snapshot_initial_delay_s": "3600"})
    runtime = fed.site_dir("site-k") / "local" / "study_runtime.yaml"
    runtime.parent.mkdir(parents=True)
    runtime.write_text(yaml.safe_dump({"format": 1, "studies": {"demo": {
        "images": {"default": IMAGE}, "env": {"TZ": "UTC"},
        "secret_env": {"DB_PASSWORD": {"source": "k8s:lung-db/password"}},
        "limits": {"cpus": 2, "memory": "1Gi", "concurrent_jobs": 2},
        "kubernetes": {"namespace": NS, "service_account": "cairn-worker",
                       "pending_timeout": pending_timeout}}}}))
    return fed


class Kubelet:
    def __init__(self, url: str, server: Any) -> None:
        configuration = k8s.Configuration()
        configuration.host = url
        api = k8s.ApiClient(configuration)
        api.user_agent = KUBELET  # to tell its requests from the launcher's
        self.core = k8s.CoreV1Api(api)
        self.server = server

    async def read_by_launcher(self, name: str, reads: int = 3) -> None:
        """Wait (bounded) until the launcher has read pod `name` `reads` times: it reads
        every poll, so by the third read it has acted on what the first one showed."""
        for _ in range(int(WAIT_S / 0.05)):
            seen = [r for r in list(self.server) if r.method.value.upper() == "GET"
                    and r.headers.get("User-Agent") != KUBELET and r.name == name
                    and not r.subresource and r.params.get("watch") != "true"]
            if len(seen) >= reads:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the launcher did not read pod {name} {reads} times")

    async def pod(self) -> dict[str, Any]:
        for _ in range(int(WAIT_S / 0.1)):
            found = await asyncio.to_thread(self.core.list_namespaced_pod, NS,
                                            _preload_content=False, _request_timeout=10)
            items = json.loads(found.data)["items"]
            if items:
                return dict(items[0])
            await asyncio.sleep(0.1)
        raise AssertionError("the launcher created no pod")

    async def set_status(self, name: str, status: dict[str, Any]) -> None:
        await asyncio.to_thread(self.core.patch_namespaced_pod_status, name, NS,
                                {"status": status}, _preload_content=False, _request_timeout=10)

    async def gone(self, name: str) -> bool:
        for _ in range(int(WAIT_S / 0.1)):
            found = await asyncio.to_thread(self.core.list_namespaced_pod, NS,
                                            _preload_content=False, _request_timeout=10)
            if name not in [p["metadata"]["name"] for p in json.loads(found.data)["items"]]:
                return True
            await asyncio.sleep(0.1)
        return False


async def worker_state(client: Client, job: str, until: str | None = None) -> str:
    """The job's one worker's state now, or (bounded) once it is `until`."""
    state = ""
    for _ in range(int(WAIT_S / 0.1)):
        workers = (await client.job(job)).workers
        state = next(iter(workers.values())).state if workers else ""
        if until is None or state == until:
            return state
        await asyncio.sleep(0.1)
    return state


def request() -> JobRequest:
    return JobRequest(name="on-k8s", timeout_s=600.0, roles=[RoleRequest(
        name="client", entrypoint="python -m fedavg.client", sites=["site-k"], min_sites=1,
        resources=Resources(gpus=0, millicpus=1000, memory_bytes=256 * 2**20))])


async def test_pod_phases_drive_a_job_to_completion(kmock: Any, tmp_path: Path) -> None:
    kmock["get", kmock.resource("", "v1", "pods"), kmock.subresource("log")] << b"round 1 ok\n"
    url = str(kmock.url).rstrip("/")
    fed, kubelet = federation(tmp_path, url), Kubelet(url, kmock)
    fed.start()
    try:
        await fed.wait_healthy(60)
        assert fed.nats is not None
        client = await connect(fed)
        try:
            job = await client.submit_request(request())
            pod = await kubelet.pod()
            name = pod["metadata"]["name"]
            await kubelet.read_by_launcher(name)  # it has seen the pod Pending
            assert await worker_state(client, job) == "launching"  # no node has it yet
            await kubelet.set_status(name, {"phase": "Running"})
            assert await worker_state(client, job, until="running") == "running"
            await kubelet.set_status(name, {"phase": "Succeeded", "containerStatuses": [
                {"name": "worker", "state": {"terminated": {"exitCode": 0}}}]})
            final = await client.wait(job, timeout=WAIT_S)
            log = b"".join([c.data async for c in client.logs(job)]).decode()
            assert await kubelet.gone(name)
        finally:
            await client.close()
        events = await study_events(fed, job=job)
    finally:
        fed.stop()
    assert final.state == "completed", final
    assert "round 1 ok" in log
    worker = pod["spec"]["containers"][0]
    assert worker["image"] == IMAGE and pod["spec"]["serviceAccountName"] == "cairn-worker"
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert env["CAIRN_SITE"] == "site-k" and env["CAIRN_JOB"] == job and env["TZ"] == "UTC"
    # A secret is a mounted file, never an env value: the study's Kubernetes Secret, and in a
    # secure federation the worker's credential, in the pod's own Secret.
    assert "DB_PASSWORD" not in env and "CAIRN_CREDS" not in env
    assert env["DB_PASSWORD_FILE"] == "/run/cairn/secrets/DB_PASSWORD"
    mounted = [s["secret"]["name"] for v in pod["spec"]["volumes"]
               if v["name"] == "cairn-secrets" for s in v["projected"]["sources"]]
    assert mounted[0] == "lung-db"
    # Secure by default: the worker's job credential and the CA, as files of its own Secret.
    assert fed.secure and mounted[1:] == [f"{name}-secrets"]
    assert env["CAIRN_CREDS_FILE"] == "/run/cairn/secrets/CAIRN_CREDS"
    assert env["CAIRN_TLS_CA_FILE"] == "/run/cairn/secrets/CAIRN_TLS_CA"
    launching = [e for e in events if isinstance(e, ev.WorkerLaunching)]
    exited = [e for e in events if isinstance(e, ev.WorkerExited)]
    assert [(e.site, e.backend) for e in launching] == [("site-k", "kubernetes")]
    assert [(e.exit_code, e.reason) for e in exited] == [(0, None)]


async def test_a_cancelled_job_deletes_its_pod(kmock: Any, tmp_path: Path) -> None:
    kmock["get", kmock.resource("", "v1", "pods"), kmock.subresource("log")] << b"stopping\n"
    url = str(kmock.url).rstrip("/")
    fed, kubelet = federation(tmp_path, url), Kubelet(url, kmock)
    fed.start()
    try:
        await fed.wait_healthy(60)
        assert fed.nats is not None
        client = await connect(fed)
        try:
            job = await client.submit_request(request())
            name = (await kubelet.pod())["metadata"]["name"]
            await kubelet.set_status(name, {"phase": "Running"})
            await client.cancel(job)
            assert await kubelet.gone(name)
            final = await client.wait(job, timeout=WAIT_S)
        finally:
            await client.close()
        exited = [e for e in await study_events(fed, job=job) if isinstance(e, ev.WorkerExited)]
    finally:
        fed.stop()
    assert final.state == "aborted", final
    assert [e.reason for e in exited] == ["cancelled"]


async def test_a_pod_no_node_can_take_ends_the_worker_unschedulable(
        kmock: Any, tmp_path: Path) -> None:
    kmock["get", kmock.resource("", "v1", "pods"), kmock.subresource("log")] << b""
    url = str(kmock.url).rstrip("/")
    fed, kubelet = federation(tmp_path, url, pending_timeout="2s"), Kubelet(url, kmock)
    fed.start()
    try:
        await fed.wait_healthy(60)
        assert fed.nats is not None
        client = await connect(fed)
        try:
            job = await client.submit_request(request())
            name = (await kubelet.pod())["metadata"]["name"]
            await kubelet.set_status(name, {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient memory."}]})
            final = await client.wait(job, timeout=WAIT_S)
            assert await kubelet.gone(name)
        finally:
            await client.close()
        exited = [e for e in await study_events(fed, job=job) if isinstance(e, ev.WorkerExited)]
    finally:
        fed.stop()
    assert final.state == "failed", final
    # What `cairn job show` tells the user: which worker, and the cluster's own reason.
    assert final.workers["site-k/client/0"].cause == "unschedulable"
    assert "insufficient resources: 0/3 nodes are available: 3 Insufficient memory" in (
        final.message)
    assert [(e.exit_code, e.reason) for e in exited] == [(None, "unschedulable")]
    assert "insufficient resources: 0/3 nodes are available" in exited[0].message


async def test_a_pod_still_pending_when_the_site_restarts_runs_to_completion(
        kmock: Any, tmp_path: Path) -> None:
    kmock["get", kmock.resource("", "v1", "pods"), kmock.subresource("log")] << b"done\n"
    url = str(kmock.url).rstrip("/")
    fed, kubelet = federation(tmp_path, url), Kubelet(url, kmock)
    fed.start()
    try:
        await fed.wait_healthy(60)
        client = await connect(fed)
        try:
            job = await client.submit_request(request())
            name = (await kubelet.pod())["metadata"]["name"]
            await kubelet.read_by_launcher(name)  # it has seen the pod Pending
            assert await worker_state(client, job) == "launching"
        finally:
            await client.close()
    finally:
        fed.stop()  # every parent goes; the pod stays, pending
    fed.start()
    try:
        await fed.wait_healthy(60)
        client = await connect(fed)
        try:
            await kubelet.set_status(name, {"phase": "Running"})
            assert await worker_state(client, job, until="running") == "running"
            await kubelet.set_status(name, {"phase": "Succeeded", "containerStatuses": [
                {"name": "worker", "state": {"terminated": {"exitCode": 0}}}]})
            final = await client.wait(job, timeout=WAIT_S)
        finally:
            await client.close()
    finally:
        fed.stop()
    assert final.state == "completed", final
