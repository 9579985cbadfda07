"""Memory limits for plain processes: a cgroup where we may make one, else RLIMIT_AS.

Preference order, first that works here:

- `cgroup-v2`: a child of the launcher's own cgroup with `memory.max` (and swap off). Needs
  the memory controller delegated to the launcher's group (e.g. systemd `Delegate=yes`);
  the cgroup v2 "no internal processes" rule means we cannot enable it ourselves while the
  launcher lives in that group, so we do not try to move the launcher.
- `cgroup-v1`: a child of the launcher's group in the v1 memory hierarchy with
  `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes` where swap accounting is on).
- `rlimit-as`: caps the worker's *virtual* address space. Blunt: runtimes that reserve large
  virtual ranges (JVM, CUDA, some allocators) fail far below the limit, and an exceeded
  limit shows up as a failed allocation, not a kill (see `_exitcause` for how we tell).
- `none`: not on Linux.

Both cgroup kinds report OOM kills (`oom_kill` in memory.events / memory.oom_control), which
is how an `oom` cause is told apart from a crash.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import time
from pathlib import Path
from typing import Literal

import msgspec

Mechanism = Literal["cgroup-v2", "cgroup-v1", "rlimit-as", "none"]
MECHANISMS: tuple[Mechanism, ...] = ("cgroup-v2", "cgroup-v1", "rlimit-as", "none")


class MemoryLimit(msgspec.Struct, frozen=True, kw_only=True):
    """What holds one worker's limit: a cgroup directory, or an RLIMIT_AS value."""

    mechanism: Mechanism
    cgroup: str | None = None
    rlimit_as: int | None = None

    @property
    def cgroup_procs(self) -> str | None:
        return None if self.cgroup is None else str(Path(self.cgroup) / "cgroup.procs")


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(root, mount point, fs type, super options) of each mount, from mountinfo."""
    out = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3:
                out.append((fields[3], fields[4], tail[0], set(tail[2].split(","))))
    return out


def _own_cgroup(controller: str) -> str | None:
    """This process's path in a hierarchy; `""` names the v2 unified one."""
    with contextlib.suppress(OSError), open("/proc/self/cgroup", encoding="utf-8") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if (controller == "" and controllers == "") or controller in controllers.split(","):
                return path
    return None


def _join(mount: str, root: str, own: str) -> Path:
    # Inside a cgroup namespace the mount's root may itself be a sub-path of the hierarchy.
    relative = own[len(root) :] if root != "/" and own.startswith(root) else own
    return Path(mount) / relative.lstrip("/")


def cgroup_parent(mechanism: Mechanism) -> Path | None:
    """The directory our workers' cgroups go under, for a cgroup mechanism."""
    for root, mount, fstype, options in _mounts():
        if mechanism == "cgroup-v2" and fstype == "cgroup2":
            own = _own_cgroup("")
            if own is not None:
                return _join(mount, root, own)
        if mechanism == "cgroup-v1" and fstype == "cgroup" and "memory" in options:
            own = _own_cgroup("memory")
            if own is not None:
                return _join(mount, root, own)
    return None


def _v2_ready(parent: Path) -> bool:
    try:
        if "memory" not in (parent / "cgroup.controllers").read_text().split():
            return False
        if "memory" in (parent / "cgroup.subtree_control").read_text().split():
            return True
        (parent / "cgroup.subtree_control").write_text("+memory")
        return True
    except OSError:
        return False


def _probe(mechanism: Mechanism) -> bool:
    """Make and remove a probe group: the only sure test that we may."""
    parent = cgroup_parent(mechanism)
    if parent is None or not parent.is_dir():
        return False
    if mechanism == "cgroup-v2" and not _v2_ready(parent):
        return False
    probe = parent / f"cairn-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        limit_file = "memory.max" if mechanism == "cgroup-v2" else "memory.limit_in_bytes"
        return (probe / limit_file).exists()
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


@functools.cache
def memory_limit_mechanism() -> Mechanism:
    """The strongest memory-limit mechanism that works for this launcher, probed once."""
    cgroups: tuple[Mechanism, ...] = ("cgroup-v2", "cgroup-v1")
    for mechanism in cgroups:
        if _probe(mechanism):
            return mechanism
    return "rlimit-as" if sys.platform.startswith("linux") else "none"


def apply_memory_limit(name: str, limit_bytes: int, mechanism: Mechanism) -> MemoryLimit:
    """Prepare a limit for one worker, falling back to RLIMIT_AS if its cgroup cannot be made."""
    if limit_bytes <= 0 or mechanism == "none":
        return MemoryLimit(mechanism="none")
    if mechanism in ("cgroup-v2", "cgroup-v1"):
        group = _make_cgroup(name, limit_bytes, mechanism)
        if group is not None:
            return MemoryLimit(mechanism=mechanism, cgroup=str(group))
    return MemoryLimit(mechanism="rlimit-as", rlimit_as=limit_bytes)


def _make_cgroup(name: str, limit_bytes: int, mechanism: Mechanism) -> Path | None:
    parent = cgroup_parent(mechanism)
    if parent is None:
        return None
    group = parent / f"cairn-{name}"
    try:
        group.mkdir(exist_ok=True)
        if mechanism == "cgroup-v2":
            (group / "memory.max").write_text(str(limit_bytes))
            swap = [("memory.swap.max", "0")]
        else:
            (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
            swap = [("memory.memsw.limit_in_bytes", str(limit_bytes))]
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        return None
    for filename, value in swap:
        # Without this a worker over its limit swaps instead of being killed; the file is
        # absent where swap accounting is off, which is fine.
        with contextlib.suppress(OSError):
            (group / filename).write_text(value)
    return group


def oom_kills(cgroup: str | None) -> int:
    """How many times the kernel OOM-killed a process in the worker's cgroup."""
    if cgroup is None:
        return 0
    for filename in ("memory.events", "memory.oom_control"):
        with contextlib.suppress(OSError):
            for line in (Path(cgroup) / filename).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return 0


def remove_cgroup(cgroup: str | None) -> None:
    """Kill what is left in the worker's cgroup and remove it; best effort, blocks up to 2 s."""
    if cgroup is None:
        return
    group = Path(cgroup)
    with contextlib.suppress(OSError, ValueError):
        for pid in (group / "cgroup.procs").read_text().split():
            # Listed in our worker's own cgroup, so these are its leftovers, never strangers.
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    for _ in range(40):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            # EBUSY until the killed processes are gone; a bounded wait, then leave it.
            time.sleep(0.05)
