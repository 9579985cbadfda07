"""`checksums.txt`: the complete inventory of a bundle, and checking a bundle against it.

Every regular file under the bundle except `checksums.txt` itself (and a signature over it)
is listed as `sha256  path`, sorted by path. Verifying names every file added, removed or
changed; anything that is not a regular file (a link, a device) counts as added, or as changed
where a listed file was.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from cairn.bundles.model import CHECKSUMS_FILE
from cairn.errors import InvalidInput, NotFound
from cairn.files import MIB, read_text

ATTESTATION_FILE = "attestation.dsse.json"
NOT_INVENTORIED = (CHECKSUMS_FILE, ATTESTATION_FILE)
LIST_FILE_BYTES = 16 * MIB
"""checksums.txt and attestation.dsse.json: a line or a subject per file of the bundle."""


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def checksums_text(files: dict[str, bytes]) -> str:
    return "".join(f"{digest(files[path])}  {path}\n" for path in sorted(files))


@dataclass
class Verification:
    """What `cairn bundle verify` found; `ok` only when nothing differs."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    checked: int = 0

    @property
    def ok(self) -> bool:
        return not (self.added or self.removed or self.changed)


def read_checksums(root: Path) -> dict[str, str]:
    """path -> sha256 from `root/checksums.txt`.

    Raises:
        NotFound: no checksums.txt (not a bundle).
        InvalidInput: a malformed line (naming its line number).
    """
    target = root / CHECKSUMS_FILE
    if not target.exists() and not target.is_symlink():
        raise NotFound("no checksums.txt: not a Cairn bundle", file=str(root))
    text = read_text(target, limit=LIST_FILE_BYTES)
    if not text.strip():
        raise InvalidInput("the file is empty: a bundle's checksums.txt lists its files",
                           file=str(target))
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        hexdigest, sep, path = line.partition("  ")
        if not sep or len(hexdigest) != 64 or not path or path in out or _unsafe(path):
            raise InvalidInput(f"expected 'SHA256  PATH' (unique, relative), got {line!r}",
                               file=str(target), line=number)
        out[path] = hexdigest.lower()
    return out


def _unsafe(path: str) -> bool:
    parts = path.split("/")
    return path.startswith("/") or any(p in ("", ".", "..") for p in parts)


def inventory(root: Path) -> tuple[dict[str, Path], list[str]]:
    """Regular files under `root` by relative path, and the paths that are not regular files."""
    files: dict[str, Path] = {}
    odd: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        for name in [*filenames, *(d for d in dirnames if (base / d).is_symlink())]:
            full = base / name
            rel = full.relative_to(root).as_posix()
            if rel in NOT_INVENTORIED:
                continue
            if full.is_symlink() or not full.is_file():
                odd.append(rel)
            else:
                files[rel] = full
    return files, sorted(odd)


def verify(root: Path) -> Verification:
    """Compare the files under `root` with its checksums.txt.

    Raises:
        NotFound: `root` is not a directory or has no checksums.txt.
        InvalidInput: checksums.txt is malformed.
    """
    if not root.is_dir():
        raise NotFound("no such bundle directory", file=str(root))
    listed = read_checksums(root)
    present, odd = inventory(root)
    result = Verification(checked=len(listed))
    result.added = sorted(p for p in [*present, *odd] if p not in listed)
    result.removed = sorted(p for p in listed if p not in present and p not in odd)
    for path in sorted(listed):
        if path in odd or (path in present
                           and digest(present[path].read_bytes()) != listed[path]):
            result.changed.append(path)
    return result
