"""OS collector (AICR names): OS.release.*, OS.sysctl.<path>, OS.kmod.<module>, OS.grub.<param>.

Reads files only, so it needs no tool. Parsers take text, so tests feed them recorded files.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from cairn.snapshot.collectors.collected import Collected, guarded
from cairn.snapshot.model import CollectorError, Reading

# A selected set: what recipes constrain (osrelease) and what GPU/HPC tuning guides set.
SYSCTLS = (
    "/proc/sys/kernel/osrelease",
    "/proc/sys/kernel/numa_balancing",
    "/proc/sys/kernel/pid_max",
    "/proc/sys/kernel/threads-max",
    "/proc/sys/vm/swappiness",
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/vm/max_map_count",
    "/proc/sys/vm/nr_hugepages",
    "/proc/sys/fs/file-max",
    "/proc/sys/fs/inotify/max_user_watches",
    "/proc/sys/fs/inotify/max_user_instances",
    "/proc/sys/net/core/somaxconn",
    "/proc/sys/net/core/rmem_max",
    "/proc/sys/net/core/wmem_max",
    "/proc/sys/net/ipv4/ip_forward",
)

OS_RELEASE_FILES = ("/etc/os-release", "/usr/lib/os-release")


def parse_os_release(text: str) -> dict[str, str]:
    """Keys and unquoted values of an os-release file (shell-style quoting, `#` comments)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        try:
            parts = shlex.split(raw, posix=True)
        except ValueError:  # an unbalanced quote: keep the raw text rather than lose the key
            parts = [raw.strip("\"'")]
        out[key.strip()] = " ".join(parts)
    return out


def parse_cmdline(text: str) -> dict[str, str]:
    """Kernel command-line parameters: `key=value`, or a bare flag as "true" (AICR OS.grub).

    Words after "--" are passed to init, not read by the kernel, so they are not parameters.
    """
    out: dict[str, str] = {}
    for token in shlex.split(text.strip()):
        if token == "--":
            break
        key, sep, value = token.partition("=")
        out[key] = value if sep else "true"
    return out


def parse_modules(text: str) -> list[str]:
    """Names of loaded kernel modules from /proc/modules (first column)."""
    return sorted({line.split()[0] for line in text.splitlines() if line.strip()})


def os_readings(
    *, os_release: str, cmdline: str, modules: str, sysctls: dict[str, str]
) -> dict[str, Reading]:
    readings: dict[str, Reading] = {}
    for key, value in parse_os_release(os_release).items():
        readings[f"OS.release.{key}"] = value
    for path, value in sysctls.items():
        readings[f"OS.sysctl.{path}"] = value
    for module in parse_modules(modules):
        readings[f"OS.kmod.{module}"] = True
    for param, value in parse_cmdline(cmdline).items():
        readings[f"OS.grub.{param}"] = value
    return readings


@guarded("os")
def collect(root: str = "/") -> Collected:
    """Collect OS readings of this machine; `root` lets tests point at a recorded tree."""
    base = Path(root)
    errors: list[CollectorError] = []

    def read(path: str) -> str:
        try:
            return (base / path.lstrip("/")).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            errors.append(CollectorError(collector="os", message=f"{path}: {exc.strerror}"))
            return ""

    release_file = next(
        (p for p in OS_RELEASE_FILES if (base / p.lstrip("/")).exists()), OS_RELEASE_FILES[0]
    )
    sysctls = {}
    for path in SYSCTLS:
        file = base / path.lstrip("/")
        if file.exists():  # a sysctl missing from this kernel is not an error
            sysctls[path] = " ".join(read(path).split())
    # A kernel built without loadable modules has no /proc/modules: nothing is loaded.
    modules = read("/proc/modules") if (base / "proc/modules").exists() else ""
    readings = os_readings(
        os_release=read(release_file),
        cmdline=read("/proc/cmdline"),
        modules=modules,
        sysctls=sysctls,
    )
    return Collected(readings=readings, errors=errors)
