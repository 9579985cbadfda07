"""The Kubernetes backend's pure parts: the strict `kubernetes:` sections of study_runtime.yaml
and site.yaml, the pod builder's merge rules, and how pod status and events are read."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from cairn.errors import InvalidInput
from cairn.launcher.backends.base import LaunchSpec
from cairn.launcher.backends.kubernetes_pod import build_pod, launch_label, pod_name
from cairn.launcher.backends.kubernetes_status import (
    IMAGE_PULL,
    INSUFFICIENT,
    MOUNT,
    NO_NODE,
    events_of,
    outcome,
    pending_reason,
)
from cairn.spec.runtime import KubernetesSettings, parse_study_runtime
from cairn.spec.site import KubernetesCluster, parse_site_config

RUNTIME = """\
format: 1
studies:
  lung:
    images: {{default: registry.site-k/worker:1.0}}
    kubernetes:
{body}
"""


def runtime(body: str) -> KubernetesSettings:
    text = RUNTIME.format(body=textwrap.indent(textwrap.dedent(body), " " * 6))
    parsed = parse_study_runtime(text, "study_runtime.yaml", Path("/etc/cairn"))
    settings = parsed.studies["lung"].kubernetes
    assert settings is not None
    return settings


def runtime_error(body: str) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        runtime(body)
    return info.value


def test_the_kubernetes_section_parses_with_kubernetes_spellings() -> None:
    got = runtime("""\
        namespace: lung
        service_account: cairn-worker
        node_selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
        affinity: {nodeAffinity: {}}
        priority_class: research
        runtime_class: nvidia
        image_pull_secrets: [regcred]
        pod_template: pods/lung.yaml
        pending_timeout: 5m
        """)
    assert got.namespace == "lung" and got.priority_class == "research"
    assert got.tolerations[0].operator == "Exists" and got.tolerations[0].key == "nvidia.com/gpu"
    assert got.pod_template == "/etc/cairn/pods/lung.yaml"  # relative to the runtime file
    assert got.pending_timeout == 300
    assert runtime("namespace: lung").pending_timeout == 600  # the default, 10 minutes


@pytest.mark.parametrize(("body", "field", "line", "says"), [
    ("namespace: lung\nnode_selectr: {}", "studies.lung.kubernetes.node_selectr", 7,
     "node_selectr"),
    ("namespace: Lung_Cancer", "studies.lung.kubernetes.namespace", 6, "Kubernetes object name"),
    ("tolerations: [{key: a, operator: Maybe}]", "studies.lung.kubernetes.tolerations[0].operator",
     6, "Maybe"),
    ("pending_timeout: soon", "studies.lung.kubernetes.pending_timeout", 6, "not a duration"),
    ("image_pull_secrets: [Reg_Cred]", "studies.lung.kubernetes.image_pull_secrets[0]", 6,
     "Secret name"),
])
def test_a_bad_kubernetes_section_names_file_line_and_field(
        body: str, field: str, line: int, says: str) -> None:
    err = runtime_error(body)
    assert err.file == "study_runtime.yaml" and says in err.message, err
    assert err.field == field, err.field
    assert err.line == line, err


SITE = """\
site: site-k
federation: nats://hub:4222
backend: kubernetes
inventory: {{gpus: 8, cpus: 64, memory: 512Gi}}
workdir: /var/lib/cairn
kubernetes: {body}
"""


def site(body: str) -> KubernetesCluster | None:
    return parse_site_config(SITE.format(body=body), "site.yaml", Path("/etc/cairn")).kubernetes


def test_the_sites_cluster_section_resolves_its_paths() -> None:
    got = site("{kubeconfig: kube/config, context: prod, namespace: cairn, "
               "workdir_claim: cairn-work}")
    assert got is not None and got.kubeconfig == "/etc/cairn/kube/config"
    assert (got.context, got.namespace, got.workdir_claim) == ("prod", "cairn", "cairn-work")
    api = site("{api_url: 'https://k8s.site-k:6443', token_file: token, ca_file: ca.crt}")
    assert api is not None and api.token_file == "/etc/cairn/token"


@pytest.mark.parametrize(("body", "field", "says"), [
    ("{kubeconfig: a, in_cluster: true}", "kubernetes.in_cluster", "not both"),
    ("{api_url: 'ftp://x'}", "kubernetes.api_url", "not an API URL"),
    ("{api_url: 'https://x', context: prod}", "kubernetes.context", "belongs to a kubeconfig"),
    ("{kubeconfg: a}", "kubernetes.kubeconfg", "kubeconfg"),
])
def test_a_bad_cluster_section_names_its_field(body: str, field: str, says: str) -> None:
    with pytest.raises(InvalidInput) as info:
        site(body)
    assert info.value.file == "site.yaml" and info.value.line == 6
    assert info.value.field == field and says in info.value.message, info.value


# -- the pod ---------------------------------------------------------------------------------

def spec(**fields: Any) -> LaunchSpec:
    base: dict[str, Any] = {"launch_id": "j-1/site-k/client/0/0", "job": "j-1", "study": "lung",
                            "site": "site-k", "role": "client", "entrypoint": "python x.py",
                            "code_dir": "/tmp", "image": "img:1"}
    return LaunchSpec(**{**base, **fields})


def pod(launch: LaunchSpec, template: dict[str, Any] | None = None,
        settings: KubernetesSettings | None = None) -> dict[str, Any]:
    return build_pod(launch, ["python", "x.py"], settings=settings or KubernetesSettings(),
                     cluster=KubernetesCluster(), namespace="lung", work_subpath="w",
                     template=template)


def test_cairns_fields_win_over_the_template() -> None:
    template = {"metadata": {"name": "mine", "labels": {"cairn.launch": "forged", "team": "a"}},
                "spec": {"restartPolicy": "Always", "automountServiceAccountToken": True,
                         "volumes": [{"name": "cairn-work", "hostPath": {"path": "/"}}],
                         "containers": [{"name": "worker", "image": "other", "args": ["-x"],
                                         "resources": {"limits": {"cpu": "64"}}}]}}
    got = pod(spec(millicpus=500), template)
    assert got["metadata"]["name"] == "cairn-j-1-site-k-client-0-0"
    assert got["metadata"]["labels"]["cairn.launch"] == launch_label("j-1/site-k/client/0/0")
    assert got["metadata"]["labels"]["team"] == "a"
    assert got["spec"]["restartPolicy"] == "Never"
    assert got["spec"]["automountServiceAccountToken"] is True  # a default the template may set
    assert got["spec"]["volumes"] == [{"name": "cairn-work", "emptyDir": {}}]  # no hostPath
    worker = got["spec"]["containers"][0]
    assert worker["image"] == "img:1" and "args" not in worker
    assert worker["resources"] == {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}


def test_a_worker_without_gpus_sees_none() -> None:
    env = {e["name"]: e["value"] for e in pod(spec())["spec"]["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    gpu = pod(spec(gpus=["0"]))["spec"]["containers"][0]
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in gpu["env"]}
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_a_host_path_dataset_or_a_secret_value_source_is_refused() -> None:
    from cairn.events.launch import DatasetMount

    with pytest.raises(InvalidInput, match="pvc:<claim>"):
        pod(spec(datasets={"ct": DatasetMount(source="/srv/ct")}))
    with pytest.raises(InvalidInput, match="k8s:<secret>/<key>"):
        pod(spec(secret_refs={"T": "env:TOKEN"}))


def test_long_names_are_cut_to_63_and_stay_unique() -> None:
    long_site = "s" * 60
    a = pod_name(spec(launch_id=f"j-1/{long_site}/client/0/0", site=long_site))
    b = pod_name(spec(launch_id=f"j-1/{long_site}/client/1/0", site=long_site, rank=1))
    assert len(a) <= 63 and len(b) <= 63 and a != b
    assert len(launch_label("x" * 500)) <= 63


# -- reading pods ----------------------------------------------------------------------------

def pending(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "uid": "u1"}, "status": {"phase": "Pending", **status}}


def test_pending_reasons_come_from_conditions_waiting_and_events() -> None:
    unschedulable = pending(conditions=[{"type": "PodScheduled", "status": "False",
                                         "message": "0/4 nodes are available: 4 Insufficient "
                                                    "memory."}])
    assert (reason := pending_reason(unschedulable, [])) and reason.kind == INSUFFICIENT
    tainted = pending(conditions=[{"type": "PodScheduled", "status": "False",
                                   "message": "0/4 nodes: 4 node(s) had untolerated taint"}])
    assert (reason := pending_reason(tainted, [])) and reason.kind == NO_NODE
    pulling = pending(containerStatuses=[{"name": "worker", "state": {"waiting": {
        "reason": "ErrImagePull", "message": "not found"}}}])
    assert (reason := pending_reason(pulling, [])) and reason.kind == IMAGE_PULL
    events = [{"reason": "Scheduled", "lastTimestamp": "2026-12-01T10:00:00Z"},
              {"reason": "FailedMount", "message": "MountVolume.SetUp failed",
               "lastTimestamp": "2026-12-01T10:00:05Z"}]
    assert (reason := pending_reason(pending(), events)) and reason.kind == MOUNT
    assert pending_reason(pending(), []) is None


def test_events_about_another_pod_or_an_earlier_one_are_ignored() -> None:
    ours = {"involvedObject": {"kind": "Pod", "name": "p", "uid": "u1"}}
    other = {"involvedObject": {"kind": "Pod", "name": "q"}}
    earlier = {"involvedObject": {"kind": "Pod", "name": "p", "uid": "u0"}}
    assert events_of(pending(), [ours, other, earlier]) == [ours]


@pytest.mark.parametrize(("status", "expected"), [
    ({"phase": "Succeeded", "containerStatuses": [
        {"name": "worker", "state": {"terminated": {"exitCode": 0}}}]}, (0, None)),
    ({"phase": "Failed", "containerStatuses": [
        {"name": "worker", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]},
     (137, "oom")),
    ({"phase": "Failed", "reason": "DeadlineExceeded", "message": "active deadline"},
     (None, "timeout")),
    ({"phase": "Failed", "reason": "Evicted", "message": "low on memory"},
     (None, "infrastructure")),
    ({"phase": "Failed", "containerStatuses": [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0}}},
        {"name": "worker", "state": {"terminated": {"exitCode": 2}}}]}, (2, "crashed")),
])
def test_how_a_pod_ended(status: dict[str, Any], expected: tuple[Any, Any]) -> None:
    code, cause, _ = outcome({"status": status})
    assert (code, cause) == expected
