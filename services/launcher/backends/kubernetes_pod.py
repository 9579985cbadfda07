"""The pod a Kubernetes worker runs in, built from its `LaunchSpec`: pure functions, no API.

What Cairn owns in the pod, which wins over the study's pod template (docs/sites/kubernetes.md):

- `metadata.name`, `metadata.namespace`; the `cairn.*` labels and annotations (template labels
  and annotations are kept beside them);
- `spec.restartPolicy: Never` (a worker runs once; retries are Cairn's, per attempt),
  `spec.activeDeadlineSeconds` (the job's timeout, enforced by the kubelet too);
- the study's `service_account`, `priority_class`, `runtime_class`, `affinity` where set;
  `node_selector` keys and `tolerations` are added to the template's;
- the container named `worker`: its image, command, working dir, environment, resources and
  the Cairn volume mounts; whatever else the template gives that container (security
  context, probes, extra mounts) is kept, as are other containers and init containers;
- the volumes `cairn-work`, `cairn-secrets`, `cairn-data-<name>`.

Defaults the template may override: `automountServiceAccountToken: false` and
`enableServiceLinks: false` (a worker needs neither the API nor service env vars: its
environment is Cairn's contract and nothing else).
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from typing import Any

from cairn.errors import InvalidInput
from cairn.launcher.backends._env import GpuIds, WorkerPlatform, worker_environment
from cairn.launcher.backends.base import LaunchHandle, LaunchSpec
from cairn.spec.runtime import KubernetesSettings
from cairn.spec.site import KubernetesCluster

WORKDIR = "/cairn/work"
DATA = "/cairn/data"
SECRETS = "/run/cairn/secrets"
CONTAINER = "worker"
GPU_RESOURCE = "nvidia.com/gpu"
LABEL_LAUNCH = "cairn.launch"
LABEL_SITE = "cairn.site"
LABEL_JOB = "cairn.job"
LABEL_ROLE = "cairn.role"
ANNOTATION_LAUNCH = "cairn.launch-id"
MANAGED_BY = {"app.kubernetes.io/managed-by": "cairn"}
# The kubelet's own deadline is a backstop for a launcher that is down when the timeout comes:
# it fires this long after Cairn's, so Cairn's (which knows the cause) normally wins.
DEADLINE_SLACK_S = 60
_NAME_MAX = 63
_NOT_NAME = re.compile(r"[^a-z0-9-]+")


def launch_label(launch_id: str) -> str:
    """A launch id as a label value (<= 63 characters, no `/`): a prefix of its sha256."""
    return hashlib.sha256(launch_id.encode()).hexdigest()[:40]


def pod_name(spec: LaunchSpec) -> str:
    """`cairn-<job>-<site>-<role>-<rank>-<attempt>`, hashed down to 63 characters when long
    (a pod's host name is its name, cut at 63)."""
    name = _NOT_NAME.sub("-", f"cairn-{spec.job}-{spec.site}-{spec.role}-{spec.rank}-"
                              f"{spec.attempt}".lower())
    if len(name) <= _NAME_MAX:
        return name
    return name[:_NAME_MAX - 9].rstrip("-") + "-" + launch_label(spec.launch_id)[:8]


def pod_location(handle: LaunchHandle) -> tuple[str, str]:
    """(namespace, name) of a handle's pod (its `native_id` is `<namespace>/<name>`)."""
    namespace, _, name = handle.native_id.partition("/")
    return namespace, name


def owned_by(pod: dict[str, Any], launch_id: str) -> bool:
    """The pod is this launch's: its label and its annotation both say so.

    Checked on what the API returns as well as in the label selector sent: a server or proxy
    that ignores the selector, or a pod that only carries a copied label, must not make a
    launcher adopt or delete a pod that is not this launch's.
    """
    meta = pod.get("metadata") or {}
    return ((meta.get("labels") or {}).get(LABEL_LAUNCH) == launch_label(launch_id)
            and (meta.get("annotations") or {}).get(ANNOTATION_LAUNCH) == launch_id)


def ownership_labels(spec: LaunchSpec) -> dict[str, str]:
    """The labels a restarted launcher finds its pods by (job, site and role obey the name
    rule, which is also a valid label value)."""
    return {LABEL_LAUNCH: launch_label(spec.launch_id), LABEL_SITE: spec.site,
            LABEL_JOB: spec.job, LABEL_ROLE: spec.role, **MANAGED_BY}


def quantity_cpu(millicpus: int) -> str:
    return f"{millicpus}m" if millicpus % 1000 else str(millicpus // 1000)


def worker_env(spec: LaunchSpec) -> list[dict[str, str]]:
    """The worker's environment (`_env.py`), never a secret value: the container's paths;
    the device plugin picks the GPUs (only their count is known here, as on Slurm); no CPU
    is pinned by id; the worker exports its spans itself."""
    env = worker_environment(spec, WorkerPlatform(
        workdir=WORKDIR, data=DATA, secrets=SECRETS, gpu_ids=GpuIds.PLATFORM))
    return [{"name": key, "value": value} for key, value in env.items()]


def values_secret_name(spec: LaunchSpec) -> str:
    """The Secret that carries a worker's secret values (a secure federation's credential,
    a study's env:/file: sources): one per pod, deleted with it."""
    return pod_name(spec) + "-secrets"


def values_secret(spec: LaunchSpec, namespace: str, owner_uid: str | None) -> dict[str, Any]:
    """That Secret, owned by the worker's pod (so the cluster deletes it with the pod)."""
    meta: dict[str, Any] = {"name": values_secret_name(spec), "namespace": namespace,
                            "labels": ownership_labels(spec)}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod_name(spec),
                                    "uid": owner_uid}]
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta,
            "immutable": True, "stringData": dict(spec.secret_env)}


def _volumes(spec: LaunchSpec, cluster: KubernetesCluster, work_subpath: str
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, the worker's mounts) for its working dir, datasets and secrets."""
    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    if cluster.workdir_claim:
        volumes = [{"name": "cairn-work",
                    "persistentVolumeClaim": {"claimName": cluster.workdir_claim}}]
        mounts = [{"name": "cairn-work", "mountPath": WORKDIR, "subPath": work_subpath}]
    else:
        volumes = [{"name": "cairn-work", "emptyDir": {}}]
        mounts = [{"name": "cairn-work", "mountPath": WORKDIR}]
    for index, (name, dataset) in enumerate(sorted(spec.datasets.items())):
        kind, _, where = dataset.source.partition(":")
        if kind != "pvc" or not where:
            raise InvalidInput(f"dataset {name!r}: on Kubernetes a source is pvc:<claim> or "
                               f"pvc:<claim>/<path>, not {dataset.source!r}", field="datasets")
        claim, _, sub = where.partition("/")
        read_only = dataset.mode == "ro"
        volume = f"cairn-data-{index}"
        volumes.append({"name": volume,
                        "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}})
        mount: dict[str, Any] = {"name": volume, "mountPath": f"{DATA}/{name}",
                                 "readOnly": read_only}
        if sub.strip("/"):
            mount["subPath"] = sub.strip("/")
        mounts.append(mount)
    sources = []
    for env_name, ref in sorted(spec.secret_refs.items()):
        kind, _, where = ref.partition(":")
        secret, _, key = where.partition("/")
        if kind != "k8s" or not secret or not key:
            raise InvalidInput(f"secret {env_name}: on Kubernetes a source is "
                               f"k8s:<secret>/<key>, not {ref!r}", field=f"secret_env.{env_name}")
        sources.append({"secret": {"name": secret, "items": [{"key": key, "path": env_name}]}})
    if spec.secret_env:
        sources.append({"secret": {"name": values_secret_name(spec), "items": [
            {"key": name, "path": name} for name in sorted(spec.secret_env)]}})
    if sources:
        # One projected volume (tmpfs, like every secret volume) with a file per secret.
        volumes.append({"name": "cairn-secrets",
                        "projected": {"sources": sources, "defaultMode": 0o440}})
        mounts.append({"name": "cairn-secrets", "mountPath": SECRETS, "readOnly": True})
    return volumes, mounts


def _resources(spec: LaunchSpec) -> dict[str, dict[str, str]]:
    # Requests equal limits: the pod is Guaranteed, which the kubelet's static CPU manager
    # and topology manager need to give a GPU worker whole cores on the GPU's NUMA node.
    amounts: dict[str, str] = {}
    if spec.millicpus:
        amounts["cpu"] = quantity_cpu(spec.millicpus)
    if spec.memory_bytes:
        amounts["memory"] = str(spec.memory_bytes)
    if spec.gpus_asked:
        amounts[GPU_RESOURCE] = str(spec.gpus_asked)
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def build_pod(spec: LaunchSpec, argv: list[str], *, settings: KubernetesSettings,
              cluster: KubernetesCluster, namespace: str, work_subpath: str,
              template: dict[str, Any] | None = None, grace_s: float = 10.0) -> dict[str, Any]:
    """The whole Pod object to create: the template, with Cairn's fields merged over it."""
    pod = copy.deepcopy(template) if template else {}
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    meta = pod.setdefault("metadata", {})
    for key in ("generateName", "resourceVersion", "uid", "creationTimestamp"):
        meta.pop(key, None)
    meta["name"], meta["namespace"] = pod_name(spec), namespace
    meta["labels"] = {**(meta.get("labels") or {}), **ownership_labels(spec)}
    meta["annotations"] = {**(meta.get("annotations") or {}), ANNOTATION_LAUNCH: spec.launch_id}
    pod.pop("status", None)
    body = pod.setdefault("spec", {})
    body["restartPolicy"] = "Never"
    body.setdefault("automountServiceAccountToken", False)
    body.setdefault("enableServiceLinks", False)
    body["terminationGracePeriodSeconds"] = math.ceil(grace_s)
    if spec.timeout_s is not None:
        body["activeDeadlineSeconds"] = math.ceil(spec.timeout_s) + DEADLINE_SLACK_S
    if settings.service_account:
        body["serviceAccountName"] = settings.service_account
    if settings.priority_class:
        body["priorityClassName"] = settings.priority_class
    if settings.runtime_class:
        body["runtimeClassName"] = settings.runtime_class
    if settings.affinity is not None:
        body["affinity"] = copy.deepcopy(settings.affinity)
    if settings.node_selector:
        body["nodeSelector"] = {**(body.get("nodeSelector") or {}), **settings.node_selector}
    if settings.tolerations:
        body["tolerations"] = [*(body.get("tolerations") or []),
                               *(_toleration(t) for t in settings.tolerations)]
    if settings.image_pull_secrets:
        known = {s.get("name") for s in body.get("imagePullSecrets") or []}
        body["imagePullSecrets"] = [*(body.get("imagePullSecrets") or []),
                                    *({"name": s} for s in settings.image_pull_secrets
                                      if s not in known)]
    volumes, mounts = _volumes(spec, cluster, work_subpath)
    ours = {v["name"] for v in volumes}
    body["volumes"] = [v for v in body.get("volumes") or [] if v.get("name") not in ours] + volumes
    containers = list(body.get("containers") or [])
    base: dict[str, Any] = next((c for c in containers if c.get("name") == CONTAINER), {})
    body["containers"] = [_worker_container(spec, argv, base, mounts),
                          *(c for c in containers if c.get("name") != CONTAINER)]
    return pod


def _worker_container(spec: LaunchSpec, argv: list[str], base: dict[str, Any],
                      mounts: list[dict[str, Any]]) -> dict[str, Any]:
    container = copy.deepcopy(base)
    container.pop("args", None)  # our command is the whole command line
    env = worker_env(spec)
    ours = {e["name"] for e in env}
    paths = {m["mountPath"] for m in mounts}
    container.update({
        "name": CONTAINER, "image": spec.image, "command": argv, "workingDir": WORKDIR,
        "env": [e for e in container.get("env") or [] if e.get("name") not in ours] + env,
        "volumeMounts": [m for m in container.get("volumeMounts") or []
                         if m.get("mountPath") not in paths] + mounts,
    })
    resources = _resources(spec)
    if resources:
        container["resources"] = resources
    else:
        container.pop("resources", None)
    return container


def _toleration(toleration: Any) -> dict[str, Any]:
    fields = ("key", "operator", "value", "effect", "tolerationSeconds")
    return {f: getattr(toleration, f) for f in fields if getattr(toleration, f) is not None}
