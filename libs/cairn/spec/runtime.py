"""`local/study_runtime.yaml` (the site operator's, per study): model and loader.

It is the site's whole say over a study: which images may run, which datasets are mounted
(read-only unless `mode: rw`), what env and secret references a worker gets, how much the study
may use here, and per-backend settings. A study missing from the file gets nothing at the site.

`trusted_code: true` says the operator trusts the study's code with the site's own secrets:
a process-backend site that cannot isolate its workers (no sandbox, no worker uid; see
docs/sites/process.md) runs such a study, and refuses every other one.

`validation` is the reserved study for recipe check jobs (the validator's own jobs): a site
that wants to be validated lists it, usually with a checks image and generous limits.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import msgspec

from cairn.errors import InvalidInput
from cairn.events.workflow import PrivacyRule
from cairn.spec._located import Located
from cairn.spec.duration import parse_duration
from cairn.spec.images import image_problem
from cairn.spec.quantity import parse_cpus, parse_gpus, parse_memory
from cairn.spec.workflow import parse_site_privacy
from cairn.yamlfile import PathKey, YamlDocument, convert, parse, read_text

VALIDATION_STUDY = "validation"
FORMAT = 1
_Scalar = int | float | str
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The worker's environment contract (DESIGN.md) that site env must not shadow either.
_CONTRACT = ("CAIRN_", "TRACEPARENT")
_SECRET_SOURCE = re.compile(r"^(?:env:[A-Za-z_][A-Za-z0-9_]*|file:/\S+|k8s:[a-z0-9.-]+/\S+)$")
_PATTERN = re.compile(r"^[A-Za-z0-9._/:@*?\[\]-]+$")
_SLURM_TIME = re.compile(r"^(?:\d+-\d+(?::\d+){0,2}|\d+(?::\d+){0,2})$")
# DNS-1123 subdomain: namespaces, service accounts, priority and runtime classes, secrets.
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ImagePolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`default` runs when a job names no image and is approved implicitly; `approved` holds
    fnmatch patterns on the full reference (`*@sha256:*` patterns require a digest)."""

    default: str | None = None
    approved: tuple[str, ...] = ()


class Dataset(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Mounted at `$CAIRN_DATA/<name>`. `source` is an absolute host path, or `pvc:<claim>`
    on Kubernetes."""

    source: str
    mode: Literal["ro", "rw"] = "ro"


class SecretRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where the launcher reads a secret at launch: `env:VAR`, `file:/path` or
    `k8s:secret/key`. The value itself never leaves the launcher."""

    source: str

    @property
    def kind(self) -> str:
        return self.source.split(":", 1)[0]

    @property
    def ref(self) -> str:
        return self.source.split(":", 1)[1]


class DockerPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    network: str | None = None
    shm_size: str | None = None
    user: str | None = None
    runtime: str | None = None


class Toleration(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A pod toleration, spelled as in a Kubernetes pod spec (so it can be copied from one)."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: int | None = None  # noqa: N815 - the Kubernetes spelling


class KubernetesSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A study's pods at a Kubernetes site (docs/sites/kubernetes.md).

    `pod_template` is resolved to an absolute path (relative to the runtime file); `affinity`
    is a Kubernetes `Affinity` object, passed through as written. `pending_timeout` bounds
    how long a pod may stay Pending before it ends with cause `unschedulable`.
    """

    namespace: str | None = None
    service_account: str | None = None
    node_selector: dict[str, str] = {}
    tolerations: tuple[Toleration, ...] = ()
    affinity: dict[str, Any] | None = None
    priority_class: str | None = None
    runtime_class: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    pod_template: str | None = None
    pending_timeout: int | str = 600  # seconds once loaded; "10m" as written


KubernetesPolicy = KubernetesSettings  # the name it had first


class SlurmPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where and how a study's workers run on a Slurm site (docs/sites/slurm.md).

    `time` is Slurm's own format (`02:00:00`, `1-00`), the most a worker may run (a shorter
    job timeout wins); `constraint` is a `--constraint` feature expression; `sandbox` is the
    container runtime inside the allocation: `none`, `apptainer` or `pyxis` (enroot).
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    constraint: str | None = None
    reservation: str | None = None
    sandbox: Literal["none", "apptainer", "pyxis"] = "none"


SlurmSettings = SlurmPolicy  # the name the Slurm backend knows it by


class StudyLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The most a study may hold at this site at once; None is no limit beyond the inventory."""

    gpus: int | None = None
    millicpus: int | None = None
    memory_bytes: int | None = None
    concurrent_jobs: int | None = None


class _RawLimits(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    gpus: _Scalar | None = None
    cpus: _Scalar | None = None
    memory: _Scalar | None = None
    concurrent_jobs: int | None = None


class _RawPolicy(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    images: ImagePolicy = msgspec.field(default_factory=ImagePolicy)
    datasets: dict[str, Dataset] = {}
    env: dict[str, str] = {}
    secret_env: dict[str, SecretRef] = {}
    limits: _RawLimits | None = None
    docker: DockerPolicy | None = None
    kubernetes: KubernetesSettings | None = None
    slurm: SlurmPolicy | None = None
    trusted_code: bool = False
    privacy: dict[str, Any] | None = None


class _RawRuntime(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    format: int
    studies: dict[str, _RawPolicy]


class StudyPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """What one study gets at this site (see the module docstring)."""

    images: ImagePolicy = msgspec.field(default_factory=ImagePolicy)
    datasets: dict[str, Dataset] = {}
    env: dict[str, str] = {}
    secret_env: dict[str, SecretRef] = {}
    limits: StudyLimits = msgspec.field(default_factory=StudyLimits)
    docker: DockerPolicy | None = None
    kubernetes: KubernetesSettings | None = None
    slurm: SlurmPolicy | None = None
    trusted_code: bool = False
    """The operator trusts this study's code with the site's secrets (see the module
    docstring); False unless written."""
    privacy: PrivacyRule | None = None
    """Filters every update from this site must pass (clipping and Gaussian noise, excluded
    parameter names); they win over a job's own (`cairn.spec.privacy`)."""


class StudyRuntime(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed study_runtime.yaml: study name -> policy."""

    format: int
    studies: dict[str, StudyPolicy]


def load_study_runtime(path: str | Path) -> StudyRuntime:
    """Read a study_runtime.yaml; `pod_template` is resolved against its folder.

    Raises:
        InvalidInput: naming file, line and field.
    """
    p = Path(path)
    text = read_text(p)
    return parse_study_runtime(text, str(p), p.resolve().parent)


def parse_study_runtime(text: str, file: str, base_dir: str | Path) -> StudyRuntime:
    doc = parse(text, file)
    if doc.data is None:
        raise InvalidInput("the file is empty", file=file)
    where = Located(doc)
    raw = convert(doc, _RawRuntime)
    if raw.format != FORMAT:
        raise where.error(
            ("format",), f"format {raw.format} is not known; this Cairn reads format {FORMAT}"
        )
    studies = {
        where.name(("studies", name), name, "study"): _policy(
            where, ("studies", name), policy, Path(base_dir), doc
        )
        for name, policy in raw.studies.items()
    }
    return StudyRuntime(format=raw.format, studies=studies)


def _policy(where: Located, at: PathKey, raw: _RawPolicy, base: Path,
            doc: YamlDocument) -> StudyPolicy:
    images = raw.images
    if images.default is not None and (problem := image_problem(images.default)):
        raise where.error((*at, "images", "default"), problem)
    for index, pattern in enumerate(images.approved):
        if not pattern or not _PATTERN.fullmatch(pattern):
            raise where.error(
                (*at, "images", "approved", index), f"{pattern!r} is not an image pattern"
            )
    for name, dataset in raw.datasets.items():
        where.name((*at, "datasets", name), name, "dataset")
        if not (
            dataset.source.startswith("/")
            or re.fullmatch(r"pvc:[a-z0-9.-]+(/\S*)?", dataset.source)
        ):
            raise where.error(
                (*at, "datasets", name, "source"),
                f"{dataset.source!r}: use an absolute path or pvc:<claim>",
            )
    for key in raw.env:
        _env_name(where, (*at, "env", key), key)
    for key, ref in raw.secret_env.items():
        _env_name(where, (*at, "secret_env", key), key)
        if key in raw.env:
            raise where.error((*at, "secret_env", key), "also set in env; name it once")
        if not _SECRET_SOURCE.fullmatch(ref.source):
            raise where.error(
                (*at, "secret_env", key, "source"),
                f"{ref.source!r}: use env:VAR, file:/path or k8s:secret/key",
            )
    if raw.docker is not None:
        _docker(where, (*at, "docker"), raw.docker)
    kube = _kubernetes(where, (*at, "kubernetes"), raw.kubernetes, base)
    if raw.slurm is not None and raw.slurm.time is not None:
        where.check((*at, "slurm", "time"), _slurm_time, raw.slurm.time)
    return StudyPolicy(
        images=images,
        datasets=raw.datasets,
        env=raw.env,
        secret_env=raw.secret_env,
        limits=_limits(where, at, raw.limits),
        docker=raw.docker,
        kubernetes=kube,
        slurm=raw.slurm,
        trusted_code=raw.trusted_code,
        privacy=None if raw.privacy is None
        else parse_site_privacy(doc, where, raw.privacy, (*at, "privacy")),
    )


# `docker run` spellings: a size in bytes with an optional unit; a user as uid[:gid] or name.
_DOCKER_VALUES = {
    "network": (re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"),
                "a network mode: none, host, bridge or a network name"),
    "shm_size": (re.compile(r"^[0-9]+[bkmgBKMG]?$"), "a size such as 64m or 1g"),
    "user": (re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$"),
             "uid[:gid] or a user name (numeric to give it secrets)"),
    "runtime": (re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"), "a runtime name such as nvidia"),
}


def _docker(where: Located, at: PathKey, docker: DockerPolicy) -> None:
    for key, (pattern, what) in _DOCKER_VALUES.items():
        value = getattr(docker, key)
        if value is not None and not pattern.fullmatch(value):
            raise where.error((*at, key), f"{value!r} is not {what}")


def _limits(where: Located, at: PathKey, raw: _RawLimits | None) -> StudyLimits:
    if raw is None:
        return StudyLimits()
    lim = (*at, "limits")
    if raw.concurrent_jobs is not None and raw.concurrent_jobs < 0:
        raise where.error((*lim, "concurrent_jobs"), "must be 0 or more")
    return StudyLimits(
        gpus=None if raw.gpus is None else where.check((*lim, "gpus"), parse_gpus, raw.gpus),
        millicpus=None if raw.cpus is None else where.check((*lim, "cpus"), parse_cpus, raw.cpus),
        memory_bytes=None
        if raw.memory is None
        else where.check((*lim, "memory"), parse_memory, raw.memory),
        concurrent_jobs=raw.concurrent_jobs,
    )


def _kubernetes(
    where: Located, at: PathKey, raw: KubernetesSettings | None, base: Path
) -> KubernetesSettings | None:
    if raw is None:
        return None
    for field in ("namespace", "service_account", "priority_class", "runtime_class"):
        value = getattr(raw, field)
        if value is not None and not _K8S_NAME.fullmatch(value):
            raise where.error((*at, field), f"{value!r} is not a Kubernetes object name")
    for index, secret in enumerate(raw.image_pull_secrets):
        if not _K8S_NAME.fullmatch(secret):
            raise where.error(
                (*at, "image_pull_secrets", index), f"{secret!r} is not a Kubernetes Secret name"
            )
    timeout = where.check((*at, "pending_timeout"), parse_duration, raw.pending_timeout)
    # Read at launch (so an edit needs no reload), where a missing file fails that launch.
    template = None if raw.pod_template is None else str((base / raw.pod_template).resolve())
    return msgspec.structs.replace(raw, pod_template=template, pending_timeout=timeout)


def _env_name(where: Located, path: PathKey, key: str) -> None:
    if not _ENV_NAME.fullmatch(key):
        raise where.error(path, f"{key!r} is not an environment variable name")
    if key.upper().startswith(_CONTRACT):
        raise where.error(
            path,
            f"{key!r} would shadow the worker contract (CAIRN_*, TRACEPARENT are set by Cairn)",
        )


def _slurm_time(text: str) -> str:
    if not _SLURM_TIME.fullmatch(text.strip()):
        raise InvalidInput(f"{text!r} is not a Slurm time: minutes, MM:SS, HH:MM:SS or "
                           "D-HH[:MM[:SS]]")
    return text
