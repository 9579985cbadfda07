"""The Kubernetes backend against kmock, an in-memory Kubernetes API over HTTP.

kmock stores objects and streams watch events, and nothing more: no scheduler, no kubelet. So
each test plays the kubelet itself, patching the pod's status through the API (as a kubelet
does), and the backend must turn what it reads into the worker's end.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("kubernetes", reason="pip install -e '.[kubernetes]' (the official client)")
kmock = pytest.importorskip("kmock", reason="pip install -e '.[dev]' (kmock: the test API)")
kubernetes_validate = pytest.importorskip("kubernetes_validate",
                                          reason="pip install -e '.[dev]' (kubernetes-validate)")

from kubernetes import client as k8s  # noqa: E402

from cairn.errors import Unavailable  # noqa: E402
from cairn.launcher.backends import (  # noqa: E402
    DatasetMount,
    LaunchSpec,
    WorkerExit,
    load_backend,
)
from cairn.launcher.backends.base import allocation_env  # noqa: E402
from cairn.launcher.backends.errors import LaunchFailed  # noqa: E402
from cairn.launcher.backends.kubernetes import RBAC_RULES, KubernetesBackend  # noqa: E402
from cairn.launcher.backends.kubernetes_pod import launch_label  # noqa: E402
from cairn.spec.runtime import KubernetesSettings, Toleration  # noqa: E402
from cairn.spec.site import KubernetesCluster  # noqa: E402
from cairn.worker.allocation import ENV as ALLOCATION_ENV  # noqa: E402
from cairn.worker.allocation import MISMATCH_EXIT, REPORT  # noqa: E402

PODS = kmock.resource("", "v1", "pods")
EVENTS = kmock.resource("", "v1", "events")
SECRETS = kmock.resource("", "v1", "secrets")
NS = "lung"
# The newest Kubernetes schema the installed kubernetes-validate carries.
SCHEMA_VERSION = kubernetes_validate.utils.latest_version()
WAIT_S = 30.0
KUBELET = "kubelet-played-by-the-test"


class Cluster:
    """The test's kubelet: reads and patches pods through the same API the backend uses."""

    def __init__(self, server: Any, url: str) -> None:
        self.server = server
        configuration = k8s.Configuration()
        configuration.host = url
        self.api = k8s.ApiClient(configuration)
        self.api.user_agent = KUBELET  # to tell its requests from the backend's
        self.core = k8s.CoreV1Api(self.api)

    async def pods(self) -> list[dict[str, Any]]:
        response = await asyncio.to_thread(self.core.list_namespaced_pod, NS,
                                           _preload_content=False, _request_timeout=10)
        return list(json.loads(response.data)["items"])

    async def pod(self) -> dict[str, Any]:
        """The one pod there is, waiting (bounded) for the backend to create it."""
        for _ in range(int(WAIT_S / 0.05)):
            pods = await self.pods()
            if pods:
                assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
                return pods[0]
            await asyncio.sleep(0.05)
        raise AssertionError("no pod was created")

    async def set_status(self, name: str, status: dict[str, Any]) -> None:
        await asyncio.to_thread(self.core.patch_namespaced_pod_status, name, NS,
                                {"status": status}, _preload_content=False,
                                _request_timeout=10)

    def backend_requests(self, name: str, *, watch: bool = False) -> int:
        """How many reads of pod `name` (or, with `watch`, watches of pods) the backend made:
        the requests the server logged that are not the test's own."""
        count = 0
        for r in list(self.server):
            if r.headers.get("User-Agent") == KUBELET or r.method.value.upper() != "GET":
                continue
            watching = r.params.get("watch") == "true"
            if (watch and watching) or (not watch and not watching and r.name == name
                                      and not r.subresource):
                count += 1
        return count

    async def read_by_backend(self, name: str, reads: int = 1, *, watched: bool = False
                              ) -> None:
        """Wait (bounded) until the backend has read pod `name` `reads` times (two reads: it
        has acted on the first, its loop being sequential), and with `watched` also has
        a watch open."""
        for _ in range(int(WAIT_S / 0.02)):
            if self.backend_requests(name) >= reads and (
                    not watched or self.backend_requests(name, watch=True) >= 1):
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"the backend did not read pod {name} {reads} times")

    def exists(self, name: str) -> bool:
        key = (PODS, NS, name)
        return key in self.server.objects and not self.server.objects[key].deleted


@pytest.fixture
async def cluster(kmock: Any) -> AsyncIterator[Cluster]:
    url = str(kmock.url).rstrip("/")
    kmock["get", PODS, kmock.subresource("log")] << b"hello from the pod\n"
    c = Cluster(kmock, url)
    yield c
    await asyncio.to_thread(c.api.close)


def make_backend(cluster: Cluster, tmp_path: Path, **options: Any) -> KubernetesBackend:
    url = str(cluster.server.url).rstrip("/")
    site = KubernetesCluster(api_url=url, namespace="default",
                             workdir_claim=options.pop("claim", None))
    options.setdefault("poll_s", 0.2)
    backend = load_backend("kubernetes", workdir=tmp_path / "site", cluster=site,
                           watch_s=2.0, **options)
    assert isinstance(backend, KubernetesBackend)
    return backend


def make_spec(tmp_path: Path, *, code: bool = False, **overrides: Any) -> LaunchSpec:
    code_dir = tmp_path / "bundle"
    code_dir.mkdir(exist_ok=True)
    if code:
        (code_dir / "train.py").write_text("print('hi')\n")
    fields: dict[str, Any] = {
        "launch_id": "j-abc/site-k/client/0/0", "job": "j-abc", "study": "lung-cancer",
        "site": "site-k", "role": "client", "entrypoint": "python -m fedavg.client",
        "code_dir": str(code_dir), "image": "registry.site-k/cairn-worker:1.0",
        "env": {"CAIRN_JOB": "j-abc", "CAIRN_SITE": "site-k"},
        "platform": {"kubernetes": msgspec.to_builtins(KubernetesSettings(namespace=NS))},
    }
    fields.update(overrides)
    return LaunchSpec(**fields)


async def ended(backend: KubernetesBackend, handle: Any) -> WorkerExit:
    return await asyncio.wait_for(backend.wait(handle), WAIT_S)


# -- the pod spec ----------------------------------------------------------------------------

POD_TEMPLATE = """\
apiVersion: v1
kind: Pod
metadata:
  labels: {team: imaging}
  annotations: {owner: site-k-ops}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000, fsGroup: 1000}
  nodeSelector: {pool: gpu}
  tolerations: [{key: dedicated, operator: Equal, value: cairn, effect: NoSchedule}]
  restartPolicy: Always
  containers:
    - name: worker
      image: ignored/by-cairn
      args: [ignored]
      securityContext: {allowPrivilegeEscalation: false}
      env: [{name: HTTPS_PROXY, value: "http://proxy:3128"}, {name: CAIRN_JOB, value: spoof}]
    - name: metrics
      image: registry.site-k/dcgm-exporter:3.3
"""


async def test_the_pod_is_exactly_what_the_study_asks_and_passes_the_schema(
        cluster: Cluster, tmp_path: Path) -> None:
    template = tmp_path / "lung-pod.yaml"
    template.write_text(POD_TEMPLATE)
    settings = KubernetesSettings(
        namespace=NS, service_account="cairn-worker", node_selector={"gpu": "h100"},
        tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        priority_class="research", pod_template=str(template))
    spec = make_spec(
        tmp_path, code=True, gpus=["0", "1"], millicpus=1500, memory_bytes=2 * 2**30,
        timeout_s=600, study_env={"TZ": "UTC"},
        datasets={"ct-scans": DatasetMount(source="pvc:ct-scans/2024", mode="ro")},
        secret_refs={"DB_PASSWORD": "k8s:lung-db/password"},
        platform={"kubernetes": msgspec.to_builtins(settings)})
    backend = make_backend(cluster, tmp_path, claim="cairn-work")
    try:
        handle = await backend.launch(spec)
        pod = await cluster.pod()
    finally:
        await backend.close()

    name = "cairn-j-abc-site-k-client-0-0"
    assert handle.native_id == f"{NS}/{name}"
    assert pod["metadata"] == {
        "name": name, "namespace": NS,
        "labels": {"team": "imaging", "cairn.launch": launch_label(spec.launch_id),
                   "cairn.site": "site-k", "cairn.job": "j-abc", "cairn.role": "client",
                   "app.kubernetes.io/managed-by": "cairn"},
        "annotations": {"owner": "site-k-ops", "cairn.launch-id": spec.launch_id,
                        "cairn.pending-timeout-s": "600"},
    }
    body = pod["spec"]
    quantities = {"cpu": "1500m", "memory": str(2 * 2**30), "nvidia.com/gpu": "2"}
    assert body["containers"][0] == {
        "name": "worker", "image": "registry.site-k/cairn-worker:1.0",
        "command": ["python", "-m", "fedavg.client"], "workingDir": "/cairn/work",
        "securityContext": {"allowPrivilegeEscalation": False},
        "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                {"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "TZ", "value": "UTC"},
                {"name": "CAIRN_JOB", "value": "j-abc"}, {"name": "CAIRN_SITE", "value": "site-k"},
                {"name": "CAIRN_WORKDIR", "value": "/cairn/work"},
                {"name": "CAIRN_DATA", "value": "/cairn/data"},
                {"name": "DB_PASSWORD_FILE", "value": "/run/cairn/secrets/DB_PASSWORD"},
                # The allocation the worker proves: 2 GPUs (the device plugin picks which).
                {"name": ALLOCATION_ENV, "value": allocation_env(spec, [], gpu_ids=[])[
                    ALLOCATION_ENV]}],
        "resources": {"requests": quantities, "limits": quantities},
        "volumeMounts": [
            {"name": "cairn-work", "mountPath": "/cairn/work",
             "subPath": "workers/j-abc_site-k_client_0_0"},
            {"name": "cairn-data-0", "mountPath": "/cairn/data/ct-scans", "readOnly": True,
             "subPath": "2024"},
            {"name": "cairn-secrets", "mountPath": "/run/cairn/secrets", "readOnly": True}],
    }
    assert body["containers"][1] == {"name": "metrics",
                                     "image": "registry.site-k/dcgm-exporter:3.3"}
    assert body["volumes"] == [
        {"name": "cairn-work", "persistentVolumeClaim": {"claimName": "cairn-work"}},
        {"name": "cairn-data-0",
         "persistentVolumeClaim": {"claimName": "ct-scans", "readOnly": True}},
        {"name": "cairn-secrets", "projected": {"defaultMode": 0o440, "sources": [
            {"secret": {"name": "lung-db", "items": [{"key": "password",
                                                      "path": "DB_PASSWORD"}]}}]}}]
    assert {k: v for k, v in body.items() if k not in ("containers", "volumes")} == {
        "restartPolicy": "Never", "serviceAccountName": "cairn-worker",
        "priorityClassName": "research", "affinity": settings.affinity,
        "nodeSelector": {"pool": "gpu", "gpu": "h100"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "cairn",
                         "effect": "NoSchedule"},
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000},
        "automountServiceAccountToken": False, "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 10, "activeDeadlineSeconds": 660,
    }
    # The official schema, strict: an unknown or misspelt field anywhere raises.
    kubernetes_validate.validate(pod, SCHEMA_VERSION, strict=True)


async def test_secret_values_go_in_a_secret_of_the_pod_never_in_the_pod(
        cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path)
    value = "nats-user-jwt-and-seed-s3cret"
    try:
        handle = await backend.launch(make_spec(tmp_path, secret_env={"CAIRN_CREDS": value}))
        pod = await cluster.pod()
    finally:
        await backend.close()
    name = handle.native_id.split("/")[1]
    assert value not in json.dumps(pod)
    secret = cluster.server.objects[SECRETS, NS, f"{name}-secrets"]
    assert secret["stringData"] == {"CAIRN_CREDS": value} and secret["immutable"] is True
    for made in (pod, secret.raw):
        kubernetes_validate.validate(made, SCHEMA_VERSION, strict=True)
    assert secret["metadata"]["labels"]["cairn.launch"] == launch_label(handle.launch_id)
    worker = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert env["CAIRN_CREDS_FILE"] == "/run/cairn/secrets/CAIRN_CREDS"
    assert [v["projected"]["sources"] for v in pod["spec"]["volumes"]
            if v["name"] == "cairn-secrets"] == [[{"secret": {
                "name": f"{name}-secrets", "items": [{"key": "CAIRN_CREDS",
                                                      "path": "CAIRN_CREDS"}]}}]]


async def test_a_pod_whose_secret_cannot_be_made_is_removed(
        cluster: Cluster, tmp_path: Path) -> None:
    forbidden = {"kind": "Status", "code": 403, "message": "secrets is forbidden"}
    cluster.server["post", SECRETS] << 403 << forbidden
    backend = make_backend(cluster, tmp_path)
    try:
        with pytest.raises(LaunchFailed, match="forbidden"):
            await backend.launch(make_spec(tmp_path, secret_env={"CAIRN_CREDS": "x"}))
        assert await cluster.pods() == []
    finally:
        await backend.close()


# -- phases drive the worker ----------------------------------------------------------------

async def test_phases_set_by_the_kubelet_drive_the_worker_to_its_exit_code(
        cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path)
    try:
        handle = await backend.launch(make_spec(tmp_path))
        name = handle.native_id.split("/")[1]
        started = asyncio.create_task(backend.started(handle))
        # The pod's loop read it Pending, then read it twice more, a poll apart: `started`
        # (which looks every poll too) has seen that Pending since.
        await cluster.read_by_backend(name, reads=3)
        assert not started.done()  # Pending: not running yet
        await cluster.set_status(name, {"phase": "Running", "containerStatuses": [
            {"name": "worker", "state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}}]})
        assert await asyncio.wait_for(started, WAIT_S) is None
        await cluster.set_status(name, {"phase": "Failed", "containerStatuses": [
            {"name": "worker", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]})
        result = await ended(backend, handle)
    finally:
        await backend.close()
    assert (result.exit_code, result.cause) == (3, "crashed")
    assert Path(handle.log_path).read_bytes() == b"hello from the pod\n"
    assert not cluster.exists(name)  # recorded, then removed


async def test_an_oom_kill_is_cause_oom(cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path)
    try:
        handle = await backend.launch(make_spec(tmp_path, memory_bytes=2**30))
        await cluster.set_status(handle.native_id.split("/")[1], {
            "phase": "Failed", "containerStatuses": [{"name": "worker", "state": {
                "terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
        result = await ended(backend, handle)
    finally:
        await backend.close()
    assert (result.exit_code, result.cause) == (137, "oom")


@pytest.mark.parametrize(("status", "kind", "says"), [
    ({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]},
     "insufficient resources", "Insufficient nvidia.com/gpu"),
    ({"containerStatuses": [{"name": "worker", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]},
     "image pull", "ImagePullBackOff"),
    ({}, "mount error", 'persistentvolumeclaim "ct-scans" not found'),
])
async def test_a_pod_pending_past_its_timeout_is_unschedulable_with_the_reason(
        cluster: Cluster, tmp_path: Path, status: dict[str, Any], kind: str, says: str) -> None:
    backend = make_backend(cluster, tmp_path)
    spec = make_spec(tmp_path, platform={"kubernetes": msgspec.to_builtins(
        KubernetesSettings(namespace=NS, pending_timeout=1))})
    try:
        handle = await backend.launch(spec)
        pod = await cluster.pod()
        name = pod["metadata"]["name"]
        cluster.server.objects[EVENTS, NS, "ev-1"] = {
            "metadata": {"name": "ev-1", "namespace": NS}, "reason": "FailedMount",
            "type": "Warning", "involvedObject": {"kind": "Pod", "name": name},
            "message": 'persistentvolumeclaim "ct-scans" not found'}
        cluster.server.objects[EVENTS, NS, "ev-2"] = {
            "metadata": {"name": "ev-2", "namespace": NS}, "reason": "FailedMount",
            "involvedObject": {"kind": "Pod", "name": "someone-elses-pod"},
            "message": "not about our pod"}
        if status:
            await cluster.set_status(name, {"phase": "Pending", **status})
        result = await ended(backend, handle)
    finally:
        await backend.close()
    assert (result.exit_code, result.cause) == (None, "unschedulable")
    assert kind in result.message and says in result.message, result.message
    assert not cluster.exists(name)


async def test_the_timeout_deletes_the_pod_with_cause_timeout(
        cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path)
    try:
        handle = await backend.launch(make_spec(tmp_path, timeout_s=1.0))
        name = handle.native_id.split("/")[1]
        await cluster.set_status(name, {"phase": "Running"})
        result = await ended(backend, handle)
    finally:
        await backend.close()
    assert result.cause == "timeout" and "timeout of 1 s" in result.message
    assert not cluster.exists(name)


async def test_cancel_deletes_the_pod(cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path)
    try:
        handle = await backend.launch(make_spec(tmp_path))
        name = handle.native_id.split("/")[1]
        await cluster.set_status(name, {"phase": "Running"})
        assert cluster.exists(name)
        await asyncio.wait_for(backend.cancel(handle, grace_s=5), WAIT_S)
        result = await ended(backend, handle)
    finally:
        await backend.close()
    assert result.cause == "cancelled"
    assert not cluster.exists(name)
    deletes = [r for r in list(cluster.server) if r.method == "DELETE"]
    assert deletes and deletes[0].params.get("gracePeriodSeconds") == "5"


# -- reconcile by labels after a restart ---------------------------------------------------

async def test_a_restarted_backend_finds_its_running_pod_by_label(
        cluster: Cluster, tmp_path: Path) -> None:
    first = make_backend(cluster, tmp_path)
    handle = await first.launch(make_spec(tmp_path))
    name = handle.native_id.split("/")[1]
    await cluster.set_status(name, {"phase": "Running"})
    await first.close()  # the launcher goes away; the pod keeps running

    second = make_backend(cluster, tmp_path)
    try:
        found = await second.reattach(handle)
        assert found == handle
        await cluster.set_status(name, {"phase": "Succeeded", "containerStatuses": [
            {"name": "worker", "state": {"terminated": {"exitCode": 0}}}]})
        result = await ended(second, handle)
    finally:
        await second.close()
    assert (result.exit_code, result.cause) == (0, None)
    selectors = [r.params.get("labelSelector") for r in list(cluster.server)
                 if r.method == "GET" and r.params.get("watch") != "true"]
    assert f"cairn.launch={launch_label(handle.launch_id)}" in selectors


async def test_a_pod_created_but_never_recorded_is_found_by_its_launch_id(
        cluster: Cluster, tmp_path: Path) -> None:
    """A launcher that died between creating a pod and recording it finds it by label, in
    the site's namespace (the one a study without its own namespace gets)."""
    first = make_backend(cluster, tmp_path)
    handle = await first.launch(make_spec(tmp_path, platform={"kubernetes": msgspec.to_builtins(
        KubernetesSettings(namespace=None))}))
    await first.close()
    second = make_backend(cluster, tmp_path)
    try:
        found = await second.find(handle.launch_id)
        nobody = await second.find(handle.launch_id.replace("/0/0", "/0/1"))
    finally:
        await second.close()
    assert found is not None and found.native_id == handle.native_id, found
    assert (found.workdir, found.log_path) == (handle.workdir, handle.log_path)
    assert nobody is None


async def test_a_pod_that_ended_while_the_launcher_was_down_is_reported(
        cluster: Cluster, tmp_path: Path) -> None:
    first = make_backend(cluster, tmp_path)
    handle = await first.launch(make_spec(tmp_path))
    await first.close()
    await cluster.set_status(handle.native_id.split("/")[1], {
        "phase": "Failed", "containerStatuses": [
            {"name": "worker", "state": {"terminated": {"exitCode": 2}}}]})

    second = make_backend(cluster, tmp_path)
    try:
        result = await asyncio.wait_for(second.reattach(handle), WAIT_S)
        assert isinstance(result, WorkerExit)
        # Recorded before the pod went: a third launcher still knows the real end.
        third = make_backend(cluster, tmp_path)
        again = await asyncio.wait_for(third.reattach(handle), WAIT_S)
        await third.close()
    finally:
        await second.close()
    assert (result.exit_code, result.cause) == (2, "crashed")
    assert isinstance(again, WorkerExit) and (again.exit_code, again.cause) == (2, "crashed")


async def test_a_pod_that_is_not_ours_is_never_adopted(cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path)
    handle = await backend.launch(make_spec(tmp_path))
    await backend.close()
    name = handle.native_id.split("/")[1]
    # Someone replaces our pod with one of the same name and a forged launch label.
    cluster.server.objects[PODS, NS, name].patch(
        {"metadata": {"annotations": {"cairn.launch-id": "j-other/site-k/client/0/0"}}})
    again = make_backend(cluster, tmp_path)
    try:
        result = await asyncio.wait_for(again.reattach(handle), WAIT_S)
    finally:
        await again.close()
    assert isinstance(result, WorkerExit) and result.cause == "infrastructure"
    assert cluster.exists(name)  # not ours: not touched


async def test_started_reports_the_end_of_a_pod_that_never_ran(
        cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path)
    spec = make_spec(tmp_path, platform={"kubernetes": msgspec.to_builtins(
        KubernetesSettings(namespace=NS, pending_timeout=1))})
    try:
        handle = await backend.launch(spec)
        result = await asyncio.wait_for(backend.started(handle), WAIT_S)
    finally:
        await backend.close()
    assert isinstance(result, WorkerExit) and result.cause == "unschedulable"



async def test_rbac_rules_are_exactly_the_calls_the_backend_makes(
        cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path)
    quick = {"kubernetes": msgspec.to_builtins(KubernetesSettings(namespace=NS,
                                                                  pending_timeout=1))}
    try:
        stuck = await backend.launch(make_spec(tmp_path, platform=quick,
                                               secret_env={"CAIRN_CREDS": "x"}))
        assert (await ended(backend, stuck)).cause == "unschedulable"
        handle = await backend.launch(make_spec(tmp_path, launch_id="j-abc/site-k/client/1/0",
                                                rank=1))
        await cluster.set_status(handle.native_id.split("/")[1], {"phase": "Running"})
        assert b"hello" in b"".join([chunk async for chunk in backend.logs(handle)])
        await backend.close()
        assert await backend.reattach(handle) == handle
        await asyncio.wait_for(backend.cancel(handle, grace_s=1), WAIT_S)
    finally:
        await backend.close()
    used: set[tuple[str, str]] = set()
    for request in list(cluster.server):
        if request.headers.get("User-Agent") == KUBELET or request.resource is None:
            continue
        resource = request.resource.plural + (f"/{request.subresource}"
                                              if request.subresource else "")
        verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}.get(
            request.method.value.upper())
        if verb is None:
            verb = ("watch" if request.params.get("watch") == "true"
                    else "get" if request.name else "list")
        used.add((resource, verb))
    granted = {(resource, verb) for rule in RBAC_RULES for resource in rule["resources"]
               for verb in rule["verbs"]}
    assert used == granted


async def test_an_api_outage_is_not_taken_for_an_unschedulable_pod(
        cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path, api_lost_s=2.0)
    quick = {"kubernetes": msgspec.to_builtins(KubernetesSettings(namespace=NS,
                                                                  pending_timeout=1))}
    handle = await backend.launch(make_spec(tmp_path, platform=quick))
    name = handle.native_id.split("/")[1]

    async def unreachable(namespace: str, name: str) -> dict[str, Any]:
        raise Unavailable("the Kubernetes API cannot be reached: connection refused")

    # The cluster's API goes away (the one seam replaced: every read of the pod fails).
    backend._pods.read = unreachable  # type: ignore[method-assign]
    try:
        result = await ended(backend, handle)
    finally:
        await backend.close()
    assert result.cause == "infrastructure" and "has not answered" in result.message
    assert cluster.exists(name)  # nothing was decided, nor deleted, on what it could not see


async def test_a_launcher_that_restarts_while_the_api_is_down_still_starts(
        cluster: Cluster, tmp_path: Path) -> None:
    first = make_backend(cluster, tmp_path)
    handle = await first.launch(make_spec(tmp_path))
    await first.close()

    async def unreachable(namespace: str, selector: str) -> list[dict[str, Any]]:
        raise Unavailable("the Kubernetes API cannot be reached: connection refused")

    second = make_backend(cluster, tmp_path)
    second._pods.find = unreachable  # type: ignore[method-assign]
    try:
        assert await second.reattach(handle) == handle  # watched, not failed
        await cluster.set_status(handle.native_id.split("/")[1], {
            "phase": "Succeeded", "containerStatuses": [
                {"name": "worker", "state": {"terminated": {"exitCode": 0}}}]})
        result = await ended(second, handle)
    finally:
        await second.close()
    assert (result.exit_code, result.cause) == (0, None)


async def test_a_worker_handed_more_gpus_than_asked_ends_allocation_mismatch(
        cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path, claim="cairn-work")
    try:
        handle = await backend.launch(make_spec(tmp_path, gpus=["0"]))
        pod = await cluster.pod()
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert ALLOCATION_ENV in env
        # The worker (in /cairn/work: this folder, through the claim) found 2 GPUs for 1
        # asked, wrote its report and ended with the SDK's mismatch exit.
        report = Path(handle.workdir) / REPORT
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps({"ok": False, "problems": [
            "asked for 1 GPU, can use 2: GPU-aaaa, GPU-bbbb"]}))
        await cluster.set_status(handle.native_id.split("/")[1], {
            "phase": "Failed", "containerStatuses": [{"name": "worker", "state": {
                "terminated": {"exitCode": MISMATCH_EXIT, "reason": "Error"}}}]})
        result = await ended(backend, handle)
    finally:
        await backend.close()
    assert (result.exit_code, result.cause) == (MISMATCH_EXIT, "allocation-mismatch")
    assert "asked for 1 GPU, can use 2" in result.message


async def test_a_pod_whose_node_went_silent_is_not_taken_for_unschedulable(
        cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path)
    quick = {"kubernetes": msgspec.to_builtins(KubernetesSettings(namespace=NS,
                                                                  pending_timeout=1))}
    try:
        handle = await backend.launch(make_spec(tmp_path, platform=quick))
        name = handle.native_id.split("/")[1]
        await cluster.set_status(name, {"phase": "Unknown"})  # the node stopped reporting
        waiting = asyncio.ensure_future(backend.wait(handle))
        done, _ = await asyncio.wait({waiting}, timeout=3.0)  # past its pending timeout
        assert not done
        await cluster.set_status(name, {"phase": "Failed", "reason": "NodeLost",
                                        "message": "node gpu-7 was lost"})
        result = await asyncio.wait_for(waiting, WAIT_S)
    finally:
        await backend.close()
    assert result.cause == "infrastructure" and "NodeLost" in result.message


async def test_the_watch_reports_an_exit_long_before_the_next_poll(
        cluster: Cluster, tmp_path: Path) -> None:
    backend = make_backend(cluster, tmp_path, poll_s=600.0)  # only the watch can wake it
    try:
        handle = await backend.launch(make_spec(tmp_path))
        name = handle.native_id.split("/")[1]
        # Its loop has read the pod once (and will not again for 600 s); the watch is open.
        await cluster.read_by_backend(name, watched=True)
        await cluster.set_status(name, {
            "phase": "Succeeded", "containerStatuses": [
                {"name": "worker", "state": {"terminated": {"exitCode": 0}}}]})
        result = await ended(backend, handle)
    finally:
        await backend.close()
    assert (result.exit_code, result.cause) == (0, None)


@pytest.mark.parametrize("content", [None, "kind: Deployment\nspec: {}\n", "spec: [1, 2\n"])
async def test_a_missing_or_wrong_pod_template_fails_the_launch_naming_the_file(
        cluster: Cluster, tmp_path: Path, content: str | None) -> None:
    template = tmp_path / "lung-pod.yaml"
    if content is not None:
        template.write_text(content)
    spec = make_spec(tmp_path, platform={"kubernetes": msgspec.to_builtins(
        KubernetesSettings(namespace=NS, pod_template=str(template)))})
    backend = make_backend(cluster, tmp_path)
    try:
        with pytest.raises(LaunchFailed) as info:
            await backend.launch(spec)
        assert info.value.file == str(template)
        assert await cluster.pods() == []
    finally:
        await backend.close()
    assert not (tmp_path / "site" / "workers").exists() or not any(
        (tmp_path / "site" / "workers").iterdir())
