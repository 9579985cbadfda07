"""What a worker's pod says about it, read from the Pod and its Events: pure functions.

A pod that is not running yet is *pending* for a reason Cairn names, from the strongest
evidence it has: the scheduler's `PodScheduled=False` condition (no node has the resources, or
none fits the selector, affinity and taints), the worker container's `waiting` reason (the
image cannot be pulled, its config refers to a missing Secret), then the pod's Events (a
volume that cannot be attached or mounted shows only there). The backend ends a pod pending
past its study's `pending_timeout` with cause `unschedulable` and this reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cairn.launcher.backends.base import ExitCause
from cairn.launcher.backends.kubernetes_pod import CONTAINER

INSUFFICIENT = "insufficient resources"
NO_NODE = "no node fits"
IMAGE_PULL = "image pull"
MOUNT = "mount error"
CONFIG = "container config"

_IMAGE_WAITING = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                  "RegistryUnavailable", "SignatureValidationFailed"}
_CONFIG_WAITING = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
_MOUNT_EVENTS = {"FailedMount", "FailedAttachVolume", "FailedMapVolume"}


@dataclass(frozen=True)
class Pending:
    """Why a pod is not running: one of the kinds above, and the cluster's own words."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


def phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def worker_status(pod: dict[str, Any]) -> dict[str, Any]:
    """The worker container's status (`{}` before the kubelet reports one)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            return dict(status)
    return {}


def is_running(pod: dict[str, Any]) -> bool:
    """The worker's container has started (phase Running, or it already ended)."""
    return phase(pod) in ("Running", "Succeeded", "Failed")


def has_ended(pod: dict[str, Any]) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def pending_reason(pod: dict[str, Any], events: list[dict[str, Any]]) -> Pending | None:
    """Why a Pending pod waits; None when nothing says (it is just being started)."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = str(condition.get("message") or condition.get("reason") or "")
            return Pending(INSUFFICIENT if "Insufficient " in message else NO_NODE, message)
    waiting = (worker_status(pod).get("state") or {}).get("waiting") or {}
    reason = str(waiting.get("reason") or "")
    if reason in _IMAGE_WAITING:
        return Pending(IMAGE_PULL, f"{reason}: {waiting.get('message') or ''}".rstrip(": "))
    if reason in _CONFIG_WAITING:
        return Pending(CONFIG, f"{reason}: {waiting.get('message') or ''}".rstrip(": "))
    # Newest last, so the latest word on the pod wins.
    for event in sorted(events, key=_event_time, reverse=True):
        why, message = str(event.get("reason") or ""), str(event.get("message") or "")
        if why in _MOUNT_EVENTS:
            return Pending(MOUNT, message)
        if why == "FailedScheduling":
            return Pending(INSUFFICIENT if "Insufficient " in message else NO_NODE, message)
        if why in ("Failed", "BackOff") and "pull" in message.lower():
            return Pending(IMAGE_PULL, message)
    return None


def events_of(pod: dict[str, Any], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events about this pod (a server may ignore the field selector we sent)."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    out = []
    for event in events:
        about = event.get("involvedObject") or {}
        if about.get("kind", "Pod") != "Pod" or about.get("name") != meta.get("name"):
            continue
        if uid and about.get("uid") and about["uid"] != uid:
            continue  # about an earlier pod of the same name
        out.append(event)
    return out


def _event_time(event: dict[str, Any]) -> str:
    # RFC 3339 strings in UTC sort as times.
    return str(event.get("lastTimestamp") or event.get("eventTime")
               or (event.get("metadata") or {}).get("creationTimestamp") or "")


def outcome(pod: dict[str, Any]) -> tuple[int | None, ExitCause | None, str]:
    """(exit code, cause, message) of a pod that has ended (phase Succeeded or Failed)."""
    status = pod.get("status") or {}
    pod_reason, pod_message = str(status.get("reason") or ""), str(status.get("message") or "")
    terminated = (worker_status(pod).get("state") or {}).get("terminated") or {}
    code = terminated.get("exitCode")
    code = int(code) if code is not None else None
    reason = str(terminated.get("reason") or "")
    if pod_reason == "DeadlineExceeded":
        return code, "timeout", f"the kubelet stopped it at its deadline: {pod_message}".rstrip(
            ": ")
    if pod_reason == "Evicted":
        return code, "infrastructure", f"evicted by the kubelet: {pod_message}".rstrip(": ")
    if reason == "OOMKilled":
        return code, "oom", "killed for using more memory than its limit (the pod's memory limit)"
    if code == 0:
        return 0, None, "exited with code 0"
    if code is not None:
        signal = terminated.get("signal")
        how = f"killed by signal {signal}" if signal else f"exited with code {code}"
        detail = f" ({reason})" if reason and reason not in ("Error", "Completed") else ""
        return code, "crashed", how + detail
    return None, "infrastructure", (f"the pod failed without a worker exit: "
                                    f"{pod_reason or pod_message or 'no reason given'}")


def stopped_by_us(code: int | None, cause: ExitCause | None, message: str, *, cancelled: bool,
                  timed_out: bool, timeout_s: float | None) -> tuple[ExitCause | None, str]:
    """The cause, where Cairn deleted the pod: a timeout or a cancel wins over how the pod
    looked as it went (a clean exit stays clean)."""
    if timed_out and code != 0:
        return "timeout", f"ran past its timeout of {timeout_s or 0:g} s and its pod was deleted"
    if cancelled and code != 0:
        return "cancelled", "cancelled; its pod was deleted"
    return cause, message
