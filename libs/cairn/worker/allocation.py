"""Every worker proves its allocation before the job's code runs.

The launcher tells a worker what the site allocated in `CAIRN_ALLOCATION`:

    CAIRN_ALLOCATION=gpus=1;gpu_ids=0;cpus=2,3;memory=1073741824

`gpus` is how many GPUs the job asked for; `gpu_ids` the devices the site picked (indices or
`GPU-...` UUIDs; empty where the platform picks them itself, as Slurm does); `cpus` the CPUs
it is pinned to (empty: not pinned); `memory` its limit in bytes (0: none).

The worker compares that with what it can see: its CPU affinity, the memory limit of its
cgroup (v2 or v1) or RLIMIT_AS, `CUDA_VISIBLE_DEVICES`, `SLURM_JOB_GPUS`, and the GPU UUIDs
NVML lists (when `pynvml` imports and a driver answers). It writes what it found to
`$CAIRN_WORKDIR/.cairn/allocation.json`, and when it can use GPUs it did not ask for, or
fewer than it asked for, it exits with `MISMATCH_EXIT` before the job's code runs; the
launcher then reports cause `allocation-mismatch`. CPU and memory differences are written
down as notes, not failures (a platform may round them).

Which GPUs a CUDA program can use: those `CUDA_VISIBLE_DEVICES` lists when it is set (each
entry an index or a UUID known to NVML; CUDA stops at the first it cannot resolve), else every
GPU NVML lists. Without NVML, the entries of `CUDA_VISIBLE_DEVICES` are taken as they are.

Standard library only, and no `json` at import: the exit wrapper (`python -I -S`) loads this
file by path for programs that are not Python, on their launch path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

ENV = "CAIRN_ALLOCATION"
REPORT = os.path.join(".cairn", "allocation.json")
# EX_CONFIG (sysexits.h): the site's configuration gave the worker the wrong resources.
MISMATCH_EXIT = 78

__all__ = [
    "ENV",
    "MISMATCH_EXIT",
    "REPORT",
    "Allocation",
    "Report",
    "Seen",
    "check",
    "compare",
    "encode",
    "observe",
    "parse",
    "prove_allocation",
    "read_report",
]


class Allocation(NamedTuple):
    """What the site allocated to one worker."""

    gpus: int = 0
    gpu_ids: tuple[str, ...] = ()
    cpus: tuple[int, ...] = ()
    memory_bytes: int = 0


class Seen(NamedTuple):
    """What the worker can see. None: that source is not there (unset, or no NVML)."""

    cpus: tuple[int, ...]
    memory_bytes: int | None
    memory_source: str
    cuda_visible_devices: tuple[str, ...] | None
    slurm_job_gpus: tuple[str, ...] | None
    nvml_uuids: tuple[str, ...] | None
    usable_gpus: tuple[str, ...] | None  # what CUDA would use; None when it cannot be told


class Report(NamedTuple):
    ok: bool
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    allocated: Allocation
    seen: Seen

    def message(self) -> str:
        return "; ".join(self.problems or self.notes) or "as allocated"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def encode(gpus: int, gpu_ids: list[str] | tuple[str, ...] = (),
           cpus: list[int] | tuple[int, ...] = (), memory_bytes: int = 0) -> str:
    """The `CAIRN_ALLOCATION` value a launcher sets."""
    return (f"gpus={gpus};gpu_ids={','.join(gpu_ids)};cpus={','.join(str(c) for c in cpus)};"
            f"memory={memory_bytes}")


def parse(text: str) -> Allocation:
    """Read `CAIRN_ALLOCATION`. Raises ValueError naming the bad part."""
    fields: dict[str, str] = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("gpus", "gpu_ids", "cpus", "memory"):
            raise ValueError(f"{ENV}: {part!r} is not gpus=, gpu_ids=, cpus= or memory=")
        fields[key.strip()] = value.strip()
    try:
        return Allocation(gpus=int(fields.get("gpus") or 0),
                          gpu_ids=_names(fields.get("gpu_ids", "")),
                          cpus=_ints(fields.get("cpus", "")),
                          memory_bytes=int(fields.get("memory") or 0))
    except ValueError:
        raise ValueError(f"{ENV}: {text!r} has a value that is not a number") from None


def nvml_uuids() -> tuple[str, ...] | None:
    """The UUIDs of every GPU NVML lists, in index order; None without pynvml or a driver."""
    try:
        import pynvml  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no library: NVML cannot tell
        return None
    try:
        uuids = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
            uuids.append(uuid.decode() if isinstance(uuid, bytes) else str(uuid))
        return tuple(uuids)
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def memory_limit(cgroup_root: str = "/sys/fs/cgroup",
                 proc_cgroup: str = "/proc/self/cgroup") -> tuple[int | None, str]:
    """The tightest memory limit on this process: its cgroup's (v2 `memory.max` or v1
    `memory.limit_in_bytes`, on its own cgroup and each parent) or RLIMIT_AS."""
    best: int | None = None
    source = "none"
    lines = (_read(proc_cgroup) or "").splitlines()
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            base, name, kind = cgroup_root, "memory.max", "cgroup-v2"
        elif "memory" in controllers.split(","):
            base, name, kind = os.path.join(cgroup_root, "memory"), "memory.limit_in_bytes", \
                "cgroup-v1"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            value = _read(os.path.join(base, *parts[:depth], name))
            if value is None or not value.isdigit():
                continue
            limit = int(value)
            # v1 writes "no limit" as a huge page-rounded number.
            if limit < (1 << 62) and (best is None or limit < best):
                best, source = limit, kind
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and (best is None or soft < best):
            best, source = soft, "rlimit-as"
    except (ImportError, OSError, ValueError):
        pass
    return best, source


def _usable(cvd: tuple[str, ...] | None, uuids: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if cvd is None:
        return uuids
    if uuids is None:
        return cvd
    usable = []
    for entry in cvd:
        if entry.isdigit() and int(entry) < len(uuids):
            usable.append(uuids[int(entry)])
        elif any(u == entry or (entry.startswith("GPU-") and u.startswith(entry)) for u in uuids):
            usable.append(next(u for u in uuids if u.startswith(entry)))
        else:
            break  # CUDA ignores this entry and every one after it
    return tuple(usable)


def observe(environ: Mapping[str, str] | None = None,
            nvml: Callable[[], tuple[str, ...] | None] | None = None) -> Seen:
    """What this process can see. `nvml` replaces the NVML query (tests fake it)."""
    env = os.environ if environ is None else environ
    cvd_text = env.get("CUDA_VISIBLE_DEVICES")
    cvd = None if cvd_text is None else _names(cvd_text)
    slurm_text = env.get("SLURM_JOB_GPUS")
    slurm = None if slurm_text is None else _names(slurm_text)
    # An empty CUDA_VISIBLE_DEVICES hides every GPU whatever NVML lists: no need to ask it.
    uuids = None if cvd == () else (nvml or nvml_uuids)()
    try:
        cpus = tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = ()
    limit, source = memory_limit()
    return Seen(cpus=cpus, memory_bytes=limit, memory_source=source,
                cuda_visible_devices=cvd, slurm_job_gpus=slurm, nvml_uuids=uuids,
                usable_gpus=_usable(cvd, uuids))


def _show(items: tuple[Any, ...]) -> str:
    return ",".join(str(i) for i in items) or "none"


def compare(allocated: Allocation, seen: Seen) -> Report:
    """Decide: GPUs beyond or short of the request are problems; CPU and memory differences
    are notes."""
    problems: list[str] = []
    notes: list[str] = []
    asked = allocated.gpus
    usable = seen.usable_gpus
    if usable is None:
        if asked > 0:
            problems.append(f"asked for {asked} GPU(s) and can see none: CUDA_VISIBLE_DEVICES "
                            "is unset and NVML does not answer")
    elif len(usable) != asked:  # more: GPUs it did not ask for; fewer: short of its request
        problems.append(f"can use {len(usable)} GPU(s) ({_show(usable)}), asked for {asked}")
    if seen.slurm_job_gpus is not None and len(seen.slurm_job_gpus) != asked:
        problems.append(f"SLURM_JOB_GPUS lists {len(seen.slurm_job_gpus)} GPU(s) "
                        f"({_show(seen.slurm_job_gpus)}), asked for {asked}")
    ids = allocated.gpu_ids
    if ids and usable is not None and len(usable) == asked:
        if all(i.startswith(("GPU-", "MIG-")) for i in ids) and seen.nvml_uuids is not None:
            if set(usable) != set(_usable(ids, seen.nvml_uuids) or ()):
                problems.append(f"can use GPUs {_show(usable)}, the site allocated {_show(ids)}")
        elif seen.cuda_visible_devices is not None and set(seen.cuda_visible_devices) != set(ids):
            problems.append(f"CUDA_VISIBLE_DEVICES is {_show(seen.cuda_visible_devices)}, "
                            f"the site allocated {_show(ids)}")
    if allocated.cpus and set(seen.cpus) != set(allocated.cpus):
        notes.append(f"sees CPUs {_show(seen.cpus)}, the site pinned it to "
                     f"{_show(allocated.cpus)}")
    if allocated.memory_bytes:
        if seen.memory_bytes is None:
            notes.append(f"no memory limit is visible; the site set {allocated.memory_bytes}")
        elif seen.memory_bytes > allocated.memory_bytes:
            notes.append(f"memory limit {seen.memory_bytes} ({seen.memory_source}) is above "
                         f"the {allocated.memory_bytes} allocated")
    return Report(ok=not problems, problems=tuple(problems), notes=tuple(notes),
                  allocated=allocated, seen=seen)


def _json(value: Any) -> str:
    """Enough JSON for a report (no json import on the wrapper's path)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        out = ['"']
        for ch in value:
            if ch in '"\\':
                out.append("\\" + ch)
            elif ord(ch) < 0x20:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return "".join([*out, '"'])
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_json(k)}: {_json(v)}" for k, v in value.items()) + "}"
    return "[" + ", ".join(_json(v) for v in value) + "]"


def write_report(report: Report, workdir: str) -> str:
    """Write `.cairn/allocation.json` atomically; returns its path."""
    body = {"ok": report.ok, "problems": list(report.problems), "notes": list(report.notes),
            "allocated": dict(report.allocated._asdict()), "seen": dict(report.seen._asdict())}
    path = os.path.join(workdir, REPORT)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(_json(body))
    os.replace(tmp, path)
    return path


def read_report(workdir: str) -> dict[str, Any] | None:
    """The report a worker left in its working directory (for the launcher); None if none."""
    import json

    try:
        with open(os.path.join(workdir, REPORT), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _no_nvml() -> None:
    return None


def check(environ: Mapping[str, str] | None = None,
          nvml: Callable[[], tuple[str, ...] | None] | None = None) -> Report | None:
    """Compare and write the report; None when the launcher set no `CAIRN_ALLOCATION`.

    Raises:
        ValueError: `CAIRN_ALLOCATION` is malformed.
    """
    env = os.environ if environ is None else environ
    text = env.get(ENV)
    if text is None:
        return None
    report = compare(parse(text), observe(env, nvml))
    workdir = env.get("CAIRN_WORKDIR") or os.getcwd()
    try:
        write_report(report, workdir)
    except OSError as exc:
        print(f"cairn: cannot write the allocation report in {workdir}: {exc}",
              file=sys.stderr, flush=True)
    return report


def prove_allocation(environ: Mapping[str, str] | None = None, *, nvml: bool = True) -> None:
    """Check, and end the process with `MISMATCH_EXIT` (saying why) on a GPU mismatch.

    Run before the job's code: the exit wrapper does for every program on the process
    backend (`nvml=False`: it stays cheap), and the SDK's `Worker.from_env` in every worker.
    """
    try:
        report = check(environ, None if nvml else _no_nvml)
    except ValueError as exc:
        print(f"cairn: {exc}", file=sys.stderr, flush=True)
        os._exit(MISMATCH_EXIT)
    if report is not None and not report.ok:
        print(f"cairn: allocation mismatch: {report.message()}", file=sys.stderr, flush=True)
        os._exit(MISMATCH_EXIT)
