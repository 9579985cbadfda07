"""The site config (`site.yaml`, the site operator's file): model and loader.

The inventory is what the agent may allocate. Omitted (wholly or per field), it is
discovered: CPUs from the process's CPU affinity, memory from /proc/meminfo, GPUs from
`gpu_ids` (their count) or 0; GPUs are never guessed, since an agent that hands out GPUs the
operator did not mean to share is worse than one that hands out none.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import msgspec

from cairn.errors import InvalidInput
from cairn.events.job import Resources
from cairn.spec._located import Located
from cairn.spec.quantity import parse_cpus, parse_gpus, parse_memory
from cairn.yamlfile import convert, parse, read_text

Backend = Literal["process", "docker", "kubernetes", "slurm"]
NATS_SCHEMES = ("nats", "tls", "ws", "wss")
DEFAULT_RUNTIME = "local/study_runtime.yaml"
_Scalar = int | float | str


class _RawInventory(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    gpus: _Scalar | None = None
    cpus: _Scalar | None = None
    memory: _Scalar | None = None


class SlurmCluster(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a `backend: slurm` site's launcher reaches the cluster (docs/sites/slurm.md).

    `driver: cli` runs sbatch/squeue/sacct/scancel on this host (a login node), with
    `slurm_conf` as SLURM_CONF when given. `driver: rest` talks to slurmrestd at `url`
    (`unix:/path` or `http(s)://host:port`) as `user`, with a JWT read from `token_file`
    (re-read on every call) or minted from the cluster's `jwt_key`. Paths are resolved against
    the site.yaml's folder. `timeout` bounds each call (seconds), `poll` is how often running
    jobs are looked at.
    """

    driver: Literal["cli", "rest"] = "cli"
    slurm_conf: str | None = None
    url: str | None = None
    user: str | None = None
    token_file: str | None = None
    jwt_key: str | None = None
    timeout: float = 30.0
    poll: float = 1.0


class KubernetesCluster(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a `backend: kubernetes` site's launcher and snapshotter reach the cluster's API.

    At most one of `kubeconfig` (with an optional `context`), `api_url` (with `token_file`
    and `ca_file`) or `in_cluster: true`; none of them means the default kubeconfig (as
    kubectl finds it). Paths are resolved against the site.yaml's folder. `namespace` is
    where pods go for a study whose `kubernetes:` settings name none. `workdir_claim` is a
    ReadWriteMany PVC that holds the site `workdir` (the launcher mounts it there): each
    worker gets its own folder of it as `/cairn/work`, code bundle included.
    """

    kubeconfig: str | None = None
    context: str | None = None
    api_url: str | None = None
    token_file: str | None = None
    ca_file: str | None = None
    in_cluster: bool = False
    namespace: str = "default"
    workdir_claim: str | None = None


class ProcessSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a `backend: process` site keeps job code from its own secrets
    (docs/sites/process.md).

    `sandbox`: `auto` (the default) runs each worker in a bubblewrap sandbox where bwrap
    works here, `bwrap` requires it (the launcher does not start without it), `none` turns it
    off (said at every start). `worker_uids`: `auto` gives each worker a uid of its own from
    a block of 1000 in 1600000000-1799999999 (chosen by the workdir) when the launcher runs
    as root; `FIRST-LAST` names the range (it must be Cairn's alone, and another site's on
    the same host another one); `none` runs workers as the launcher's user. `read_only`: more
    host paths (absolute; a conda environment, shared tools) that sandboxed workers may read.
    With neither a sandbox nor worker uids, only studies marked `trusted_code: true` run.
    """

    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    worker_uids: str = "auto"
    read_only: tuple[str, ...] = ()


def parse_uid_range(text: str) -> range:
    """`FIRST-LAST` (or one uid) as a range; no system uid, nobody (65534) or (uid_t)-1.

    Raises:
        ValueError: with the reason.
    """
    first, dash, last = text.strip().partition("-")
    if not first.isdigit() or (dash and not last.isdigit()):
        raise ValueError(f"{text!r} is not FIRST-LAST (example: 1600000000-1600000999)")
    lo, hi = int(first), int(last) if dash else int(first)
    if lo > hi:
        raise ValueError(f"{text!r}: the first uid is above the last")
    if lo < 1000 or hi >= 2**32 - 1:
        raise ValueError(f"{text!r}: use uids from 1000 to 4294967294 (no system accounts)")
    if lo <= 65534 <= hi or lo <= 65535 <= hi:
        raise ValueError(f"{text!r} holds 65534/65535 (nobody, the 16-bit -1)")
    return range(lo, hi + 1)


class _RawProcess(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    worker_uids: str | int = "auto"
    read_only: list[str] = []


class _RawSite(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    site: str
    federation: str
    worker_nats_url: str | None = None
    backend: Backend
    inventory: _RawInventory | None = None
    workdir: str
    runtime: str = DEFAULT_RUNTIME
    gpu_ids: list[str | int] | None = None
    kubernetes: KubernetesCluster | None = None
    slurm: SlurmCluster | None = None
    process: _RawProcess | None = None


class SiteConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed site config.

    Attributes:
        site: Site name (name rule); must be in federation.yaml.
        federation: NATS URL(s) the agent and launcher connect to.
        worker_nats_url: NATS URL workers use; defaults to `federation`.
        backend: How workers run: process, docker, kubernetes or slurm.
        inventory: What the agent may allocate, discovered where not written.
        workdir: Absolute folder for worker working dirs and launch record caches.
        runtime: Absolute path of the study_runtime.yaml (relative ones are resolved against
            the site.yaml's folder).
        gpu_ids: GPU indexes or UUIDs the agent hands out (CUDA_VISIBLE_DEVICES), if given.
        kubernetes: The cluster's API, for `backend: kubernetes` (paths made absolute).
        slurm: How to reach the cluster, for `backend: slurm` (paths made absolute).
        process: How workers are isolated, for `backend: process` (defaults when omitted).
    """

    site: str
    federation: str
    worker_nats_url: str
    backend: Backend
    inventory: Resources
    workdir: str
    runtime: str
    gpu_ids: tuple[str, ...] = ()
    kubernetes: KubernetesCluster | None = None
    slurm: SlurmCluster | None = None
    process: ProcessSettings = ProcessSettings()


def discover_inventory() -> Resources:
    """CPUs this process may run on and the machine's memory; GPUs 0 (never guessed)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return Resources(gpus=0, millicpus=(cpus or 1) * 1000, memory_bytes=_mem_total())


def _mem_total() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    # Without /proc (not Linux), fall back to sysconf, which most Unixes have.
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def load_site_config(
    path: str | Path, *, discover: Callable[[], Resources] = discover_inventory
) -> SiteConfig:
    """Read `site.yaml`; relative `workdir` and `runtime` are resolved against its folder.

    Args:
        discover: Inventory discovery, replaceable in tests; called only when needed.

    Raises:
        InvalidInput: naming file, line and field.
    """
    p = Path(path)
    text = read_text(p)
    return parse_site_config(text, str(p), p.resolve().parent, discover=discover)


def parse_site_config(
    text: str,
    file: str,
    base_dir: str | Path,
    *,
    discover: Callable[[], Resources] = discover_inventory,
) -> SiteConfig:
    doc = parse(text, file)
    if doc.data is None:
        raise InvalidInput("the file is empty", file=file)
    where = Located(doc)
    raw = convert(doc, _RawSite)
    base = Path(base_dir)
    gpu_ids = tuple(str(g) for g in raw.gpu_ids or ())
    for index, gpu in enumerate(gpu_ids):
        if not gpu.strip() or "," in gpu:
            raise where.error(("gpu_ids", index), f"{gpu!r} is not a GPU index or UUID")
    if len(set(gpu_ids)) != len(gpu_ids):
        raise where.error(("gpu_ids",), "a GPU is listed twice")
    return SiteConfig(
        site=where.name(("site",), raw.site, "site"),
        federation=_nats_url(where, "federation", raw.federation),
        worker_nats_url=_nats_url(where, "worker_nats_url", raw.worker_nats_url or raw.federation),
        backend=raw.backend,
        inventory=_inventory(where, raw.inventory, gpu_ids, discover),
        workdir=str((base / Path(raw.workdir).expanduser()).resolve()),
        runtime=str((base / raw.runtime).resolve()),
        gpu_ids=gpu_ids,
        kubernetes=_kubernetes(where, raw.kubernetes, base),
        slurm=_slurm(where, raw.slurm, base),
        process=_process(where, raw.process),
    )


def _process(where: Located, raw: _RawProcess | None) -> ProcessSettings:
    if raw is None:
        return ProcessSettings()
    uids = str(raw.worker_uids).strip()
    if uids not in ("auto", "none"):
        try:
            parse_uid_range(uids)
        except ValueError as exc:
            raise where.error(("process", "worker_uids"), f"{exc}; or auto, none") from None
    for index, path in enumerate(raw.read_only):
        if not path.startswith("/"):
            raise where.error(("process", "read_only", index),
                              f"{path!r}: give an absolute path")
    return ProcessSettings(sandbox=raw.sandbox, worker_uids=uids,
                           read_only=tuple(raw.read_only))


def _slurm(where: Located, raw: SlurmCluster | None, base: Path) -> SlurmCluster | None:
    if raw is None:
        return None
    if raw.driver == "rest":
        if raw.url is None:
            raise where.error(("slurm", "driver"), "driver rest needs url (unix:/path or "
                              "http://host:port of slurmrestd)")
        parts = urlsplit(raw.url)
        if parts.scheme not in ("unix", "http", "https") or not (parts.path or parts.hostname):
            raise where.error(("slurm", "url"), f"{raw.url!r}: use unix:/path/to/socket or "
                              "http(s)://host:port")
        if (raw.token_file is None) == (raw.jwt_key is None):
            raise where.error(("slurm", "driver"), "driver rest needs one of token_file or "
                              "jwt_key")
    else:
        for name in ("url", "user", "token_file", "jwt_key"):
            if getattr(raw, name) is not None:
                raise where.error(("slurm", name), f"{name} belongs to driver rest")
    for name in ("timeout", "poll"):
        if getattr(raw, name) <= 0:
            raise where.error(("slurm", name), "must be more than 0 seconds")
    paths = {name: str((base / Path(value).expanduser()).resolve())
             for name in ("slurm_conf", "token_file", "jwt_key")
             if (value := getattr(raw, name)) is not None}
    return msgspec.structs.replace(raw, **paths)


def _kubernetes(where: Located, raw: KubernetesCluster | None, base: Path
                ) -> KubernetesCluster | None:
    if raw is None:
        return None
    ways = [name for name, given in (("kubeconfig", raw.kubeconfig), ("api_url", raw.api_url),
                                     ("in_cluster", raw.in_cluster)) if given]
    if len(ways) > 1:
        raise where.error(("kubernetes", ways[1]), f"give one of {' or '.join(ways)}, not both")
    if raw.api_url is not None:
        parts = urlsplit(raw.api_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise where.error(("kubernetes", "api_url"),
                              f"{raw.api_url!r} is not an API URL (example: https://k8s:6443)")
    if raw.context is not None and raw.kubeconfig is None and (raw.api_url or raw.in_cluster):
        raise where.error(("kubernetes", "context"), "a context belongs to a kubeconfig")
    paths = {name: str((base / Path(value).expanduser()).resolve())
             for name in ("kubeconfig", "token_file", "ca_file")
             if (value := getattr(raw, name)) is not None}
    return msgspec.structs.replace(raw, **paths)


def _inventory(
    where: Located,
    raw: _RawInventory | None,
    gpu_ids: tuple[str, ...],
    discover: Callable[[], Resources],
) -> Resources:
    raw = raw or _RawInventory()
    at = ("inventory",)
    gpus = None if raw.gpus is None else where.check((*at, "gpus"), parse_gpus, raw.gpus)
    if gpus is not None and gpu_ids and gpus != len(gpu_ids):
        raise where.error((*at, "gpus"), f"{gpus} GPUs but gpu_ids lists {len(gpu_ids)}")
    cpus = None if raw.cpus is None else where.check((*at, "cpus"), parse_cpus, raw.cpus)
    memory = None if raw.memory is None else where.check((*at, "memory"), parse_memory, raw.memory)
    found = discover() if cpus is None or memory is None else None
    return Resources(
        gpus=gpus if gpus is not None else len(gpu_ids),
        millicpus=cpus if cpus is not None else found.millicpus if found else 0,
        memory_bytes=memory if memory is not None else found.memory_bytes if found else 0,
    )


def _nats_url(where: Located, field: str, value: str) -> str:
    """One URL or a comma-separated list, each nats://, tls://, ws:// or wss:// with a host."""
    for url in value.split(","):
        parts = urlsplit(url.strip())
        if parts.scheme not in NATS_SCHEMES or not parts.hostname:
            raise where.error(
                (field,), f"{url.strip()!r} is not a NATS URL (example: nats://hub.example:4222)"
            )
        try:
            parts.port  # noqa: B018 - urlsplit checks the port only when asked
        except ValueError:
            raise where.error((field,), f"{url.strip()!r} has a bad port") from None
    return value
