"""What the Kubernetes backend reads and writes on the launcher's own disk: the study's
settings and pod template, whether a job brings code, and each worker's end record."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import msgspec

from cairn.errors import InvalidInput
from cairn.launcher.backends._workdir import CONTROL_DIR
from cairn.launcher.backends.base import LaunchSpec, WorkerExit
from cairn.launcher.backends.errors import LaunchFailed
from cairn.spec.duration import parse_duration
from cairn.spec.runtime import KubernetesSettings
from cairn.spec.site import KubernetesCluster
from cairn.yamlfile import parse, read_text

RECORD = "pod.json"


def settings_of(platform: dict[str, Any]) -> KubernetesSettings:
    raw = platform.get("kubernetes") or {}
    try:
        settings = msgspec.convert(raw, KubernetesSettings)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"kubernetes settings: {exc}", field="kubernetes") from None
    pending = parse_duration(settings.pending_timeout)  # seconds already, from the loader
    return msgspec.structs.replace(settings, pending_timeout=pending)


def read_template(path: str | None) -> dict[str, Any] | None:
    """The study's pod template (a Pod manifest), or None."""
    if path is None:
        return None
    try:
        doc = parse(read_text(Path(path)), path)
    except InvalidInput as exc:
        raise LaunchFailed(f"pod template: {exc}", file=path) from None
    data = doc.data
    if not isinstance(data, dict) or data.get("kind", "Pod") != "Pod" or not isinstance(
            data.get("spec", {}), dict):
        raise LaunchFailed("a pod template is a Pod manifest (kind: Pod, with a spec)",
                           file=path)
    return data


def refuse_unrunnable(spec: LaunchSpec, cluster: KubernetesCluster) -> None:
    """Refuse, before anything is made, a launch no pod of this site can run.

    Raises:
        InvalidInput: no image; a job with code on a site without a `workdir_claim`;
            several nodes.
    """
    if not spec.image:
        raise InvalidInput("the kubernetes backend needs an image: set images.default for "
                           "the study in study_runtime.yaml, or image in the job spec",
                           field="image")
    if spec.nodes > 1:
        raise InvalidInput(f"the kubernetes backend runs a worker as one pod, not across "
                           f"{spec.nodes} nodes", field="nodes")
    if not cluster.workdir_claim and has_code(spec.code_dir):
        raise InvalidInput("this job has code, and a pod sees the launcher's files only "
                           "through a shared volume: set kubernetes.workdir_claim in "
                           "site.yaml", field="kubernetes.workdir_claim")


def has_code(code_dir: str) -> bool:
    return any(p.name != ".complete" for p in Path(code_dir).iterdir())


def read_record(workdir: str) -> WorkerExit | None:
    try:
        return msgspec.json.decode((Path(workdir) / CONTROL_DIR / RECORD).read_bytes(),
                                   type=WorkerExit)
    except (OSError, msgspec.DecodeError):
        return None


def write_record(workdir: str, ended: WorkerExit) -> None:
    path = Path(workdir) / CONTROL_DIR / RECORD
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(msgspec.json.encode(ended))
