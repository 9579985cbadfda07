"""Build container images without a registry or a Dockerfile: a root filesystem assembled
from files on this host, written as a `docker load` archive.

    root = RootFS()
    root.add_host_path("/usr/bin/busybox")          # with the symlinks on its way
    root.add_bytes("etc/passwd", b"root:x:0:0::/root:/bin/sh\n")
    archive = write_archive(root, out, tag="cairn/x:1", config=ImageConfig(cmd=["sh"]))
    # docker load -i out   ->  the image id is archive.image_id

Reproducible: the same inputs give the same bytes, so the same image id (the sha256 of the
image config): entries are sorted, every mtime is `epoch`, owners are root, and the config's
`created` is `epoch` too. Nothing here reads the clock.

Used by deploy/images/worker/build.py; a parent image (deploy/images/cairn/) reuses it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

# 2020-01-01T00:00:00Z: any fixed time; 0 makes some tools print 1970 and look broken.
DEFAULT_EPOCH = 1577836800


@dataclass(frozen=True)
class Entry:
    """One thing in the image: a file (`data`, or `source` read lazily), a dir or a link."""

    kind: str  # "file" | "dir" | "symlink"
    mode: int = 0o755
    data: bytes | None = None
    source: Path | None = None
    target: str = ""

    def content(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.source is not None
        return self.source.read_bytes()


@dataclass
class RootFS:
    """A root filesystem being assembled; image paths are relative (`usr/bin/x`)."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def _parents(self, path: str) -> None:
        parent = PurePosixPath(path).parent
        while str(parent) not in (".", "/", ""):
            if str(parent) not in self.entries:
                self.entries[str(parent)] = Entry("dir", 0o755)
            parent = parent.parent

    def add_dir(self, path: str, mode: int = 0o755) -> None:
        path = _norm(path)
        self._parents(path)
        self.entries[path] = Entry("dir", mode)

    def add_bytes(self, path: str, data: bytes, mode: int = 0o644) -> None:
        path = _norm(path)
        self._parents(path)
        self.entries[path] = Entry("file", mode, data=data)

    def add_file(self, path: str, source: Path, mode: int | None = None) -> None:
        """Copy `source` (a regular file) to `path` in the image."""
        path = _norm(path)
        self._parents(path)
        if mode is None:
            mode = 0o755 if os.access(source, os.X_OK) else 0o644
        self.entries[path] = Entry("file", mode, source=source)

    def add_symlink(self, path: str, target: str) -> None:
        path = _norm(path)
        self._parents(path)
        self.entries[path] = Entry("symlink", target=target)

    def add_host_path(self, host_path: str | Path) -> None:
        """Copy a host file to the same path in the image, recreating every symlink met on
        the way (`/lib -> usr/lib`, `libssl.so.3 -> libssl.so.3.0`), so the image resolves
        the path exactly as the host does."""
        parts = Path(os.path.abspath(host_path)).parts[1:]
        current = Path("/")
        for index, part in enumerate(parts):
            current = current / part
            rel = str(current)[1:]
            if current.is_symlink():
                target = os.readlink(current)
                self.add_symlink(rel, target)
                resolved = (current.parent / target)
                rest = Path(*parts[index + 1:]) if index + 1 < len(parts) else None
                self.add_host_path(resolved / rest if rest else resolved)
                return
            if index == len(parts) - 1:
                if current.is_dir():
                    self.add_dir(rel)
                else:
                    self.add_file(rel, current)

    def add_tree(self, image_dir: str, source: Path,
                 skip: Iterable[str] = ("__pycache__",)) -> list[str]:
        """Copy a host directory tree under `image_dir`; returns the image paths of its files.
        Directories named in `skip` are left out at any depth."""
        skipped = set(skip)
        added = []
        for root, dirs, files in os.walk(source):
            dirs[:] = sorted(d for d in dirs if d not in skipped)
            rel_root = Path(root).relative_to(source)
            for name in sorted(files):
                host = Path(root) / name
                image_path = str(PurePosixPath(image_dir) / rel_root / name)
                if host.is_symlink():
                    self.add_symlink(image_path, os.readlink(host))
                elif host.is_file():
                    self.add_file(image_path, host)
                    added.append(_norm(image_path))
        return added


def _norm(path: str) -> str:
    return str(PurePosixPath("/", path).relative_to("/"))


def shared_libraries(binaries: Iterable[Path]) -> set[Path]:
    """The shared libraries `binaries` load (as `ldd` resolves them here), the loader too."""
    found: set[Path] = set()
    todo = [str(b) for b in binaries]
    ldd = shutil.which("ldd")
    if ldd is None:
        raise RuntimeError("ldd is not installed (Debian: libc-bin)")
    # ldd on many files at once is one process; it prints "file:" headers between them.
    for start in range(0, len(todo), 200):
        out = subprocess.run([ldd, *todo[start:start + 200]], capture_output=True, text=True,
                             timeout=120, check=False).stdout
        for line in out.splitlines():
            line = line.strip()
            if "=>" in line:
                target = line.split("=>", 1)[1].strip().split(" (")[0]
                if target.startswith("/"):
                    found.add(Path(target))
            elif line.startswith("/") and " (0x" in line:
                found.add(Path(line.split(" (")[0]))
    return found


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an image config (what `docker inspect` shows under Config)."""

    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    labels: dict[str, str] = field(default_factory=dict)
    user: str = ""
    entrypoint: list[str] = field(default_factory=list)
    """Written only when set, so images without one keep their ids."""


@dataclass(frozen=True)
class Archive:
    path: Path
    image_id: str  # "sha256:<hex>": what `docker images --no-trunc` shows after loading
    layer_digest: str
    size: int


def layer_tar(root: RootFS, epoch: int = DEFAULT_EPOCH) -> bytes:
    """The root filesystem as one uncompressed tar layer: sorted, fixed times, root-owned."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.entries):
            entry = root.entries[path]
            info = tarfile.TarInfo(path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
            info.mode = entry.mode & 0o7777
            if entry.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.kind == "symlink":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target, 0o777
                tar.addfile(info)
            else:
                data = entry.content()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def write_archive(root: RootFS, out: Path, *, tag: str, config: ImageConfig,
                  epoch: int = DEFAULT_EPOCH) -> Archive:
    """Write a `docker load` archive (one layer) of `root` to `out`."""
    layer = layer_tar(root, epoch)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    created = _iso(epoch)
    image_config = {
        "architecture": _architecture(), "os": "linux", "created": created,
        "config": {"Cmd": config.cmd, "Env": [f"{k}={v}" for k, v in config.env.items()],
                   "WorkingDir": config.workdir, "Labels": dict(sorted(config.labels.items())),
                   "User": config.user},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": f"cairn imagetar: {tag}"}],
    }
    if config.entrypoint:
        image_config["config"]["Entrypoint"] = config.entrypoint  # type: ignore[index]
    config_bytes = json.dumps(image_config, sort_keys=True, separators=(",", ":")).encode()
    config_hex = hashlib.sha256(config_bytes).hexdigest()
    layer_name = f"{diff_id.removeprefix('sha256:')}/layer.tar"
    manifest = json.dumps([{"Config": f"{config_hex}.json", "RepoTags": [tag],
                            "Layers": [layer_name]}]).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in ((f"{config_hex}.json", config_bytes), (layer_name, layer),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.mtime, info.size, info.mode = epoch, len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, out)
    return Archive(path=out, image_id=f"sha256:{config_hex}", layer_digest=diff_id,
                   size=len(layer))


def _iso(epoch: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _architecture() -> str:
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def executable_mode(path: Path) -> bool:
    return bool(path.stat().st_mode & stat.S_IXUSR)
