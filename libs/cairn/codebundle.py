"""Job code bundles: a folder packed into a deterministic `.tar.gz`, named by its sha256.

The same files give the same bytes (and so the same digest) on any machine and at any time:
entries are sorted, owners, times and modes are normalized, and the gzip header carries no
time or file name. That is what makes `cairn job rerun` reuse a bundle, and the object store
(`artifacts_<study>`) hold each distinct bundle once.

`unpack` runs on sites, on data that arrived over the bus: it refuses anything that could
write outside its destination (absolute paths, `..`, links that lead out, devices).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from cairn.errors import InvalidInput

SKIP_DIRS = frozenset({"__pycache__", ".git", ".venv", ".mypy_cache", ".pytest_cache"})
SKIP_SUFFIXES = (".pyc", ".pyo")
MAX_BUNDLE_BYTES = 256 * 1024 * 1024
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
_DIR_MODE = 0o755
_EXEC_MODE = 0o755
_FILE_MODE = 0o644


class Bundle(NamedTuple):
    """A packed folder: the gzip bytes and their sha256 (hex)."""

    data: bytes
    digest: str


def pack(folder: str | Path, *, max_bytes: int = MAX_BUNDLE_BYTES) -> Bundle:
    """Pack `folder` deterministically.

    Raises:
        InvalidInput: the folder is missing, holds a link that leads outside it or a special
            file, or packs to more than `max_bytes`.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InvalidInput(f"{root}: no such folder", field="code")
    raw = io.BytesIO()
    # format=PAX keeps long names; the PAX headers carry no times because we set none.
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk(root):
            tar.addfile(*_entry(root, path))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    data = out.getvalue()
    if len(data) > max_bytes:
        raise InvalidInput(
            f"{root}: the code folder packs to {len(data)} bytes, more than the "
            f"{max_bytes} allowed; keep data out of it (sites mount datasets)",
            field="code",
        )
    return Bundle(data=data, digest=hashlib.sha256(data).hexdigest())


def _walk(root: Path) -> list[Path]:
    """Every path to pack, sorted by its relative POSIX name (so order never depends on the FS)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        base = Path(dirpath)
        found.extend(base / d for d in dirnames)
        found.extend(base / f for f in filenames if not f.endswith(SKIP_SUFFIXES))
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _entry(root: Path, path: Path) -> tuple[tarfile.TarInfo, io.BytesIO | None]:
    name = path.relative_to(root).as_posix()
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        if not _inside(PurePosixPath(name).parent, target):
            raise InvalidInput(
                f"{name}: the link to {target!r} leads outside the code folder", field="code"
            )
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
        return info, None
    if stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, _DIR_MODE
        return info, None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidInput(f"{name}: not a regular file, folder or link", field="code")
    data = path.read_bytes()
    info.size = len(data)
    info.mode = _EXEC_MODE if st.st_mode & 0o111 else _FILE_MODE
    return info, io.BytesIO(data)


def _inside(parent: PurePosixPath, target: str) -> bool:
    """Whether a link at `parent/<link>` pointing to `target` stays inside the bundle root."""
    if target.startswith("/"):
        return False
    depth = len(parent.parts) if parent != PurePosixPath(".") else 0
    for part in PurePosixPath(target).parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part != ".":
            depth += 1
    return True


def unpack(data: bytes, dest: str | Path, *, max_bytes: int = MAX_UNPACKED_BYTES) -> list[str]:
    """Unpack a bundle into `dest` (created if absent); returns the names written.

    Raises:
        InvalidInput: the data is not a bundle, or an entry would escape `dest`, is a hard
            link or special file, or the files add up to more than `max_bytes`.
    """
    target = Path(dest)
    target.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            total = 0
            for member in members:
                _check_member(member)
                total += member.size
                if total > max_bytes:
                    raise InvalidInput(f"bundle unpacks to more than {max_bytes} bytes")
            # Belt and braces: Python's own "data" filter (3.11.4+) re-checks every member.
            if hasattr(tarfile, "data_filter"):
                tar.extractall(target, members=members, filter="data")
            else:  # pragma: no cover - older 3.11 patch releases
                tar.extractall(target, members=members)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InvalidInput(f"not a code bundle: {exc}") from None
    return [m.name for m in members]


def _check_member(member: tarfile.TarInfo) -> None:
    name = PurePosixPath(member.name)
    if name.is_absolute() or member.name.startswith(("/", "\\")):
        raise InvalidInput(f"bundle entry {member.name!r} has an absolute path")
    if ".." in name.parts:
        raise InvalidInput(f"bundle entry {member.name!r} leads outside the destination")
    if member.islnk():
        raise InvalidInput(f"bundle entry {member.name!r} is a hard link")
    if member.issym():
        if not _inside(name.parent, member.linkname):
            raise InvalidInput(
                f"bundle entry {member.name!r} links outside the destination ({member.linkname!r})"
            )
    elif not (member.isfile() or member.isdir()):
        raise InvalidInput(f"bundle entry {member.name!r} is not a file, folder or link")
