"""The sandbox's `/etc`: a copy of the few host files a worker needs, mounted in one go.

Name resolution (`hosts`, `resolv.conf`, `nsswitch.conf`, `gai.conf`, `host.conf`,
`services`, `protocols`), `ssl/openssl.cnf`, the dynamic loader's cache, the time zone and
the user database are copied; the folders of TLS roots and Debian's `alternatives` (links
into /usr) are mounted over their place in the copy (`FOLDERS`). One bind of the copy costs a
worker's start a fraction of binding each file (each bind is a mount), and `/etc` as a whole
is not shown: it may hold a site's own files. `passwd` and `group` gain an entry per worker
uid (`cairn-<uid>`), so a tool that asks who it is gets an answer.

The copy lives in the site workdir and is brought up to date before each launch
(`refresh`): a file that changed on the host (a new resolv.conf, say) is copied again, by
its size, mtime and inode. A running worker sees the new copy too: its `/etc` is the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

FILES = ("gai.conf", "group", "host.conf", "hosts", "ld.so.cache", "localtime",
         "nsswitch.conf", "os-release", "passwd", "protocols", "resolv.conf", "services",
         "ssl/openssl.cnf", "timezone")
FOLDERS = ("alternatives", "pki/tls/certs", "ssl/certs")
ETC = FILES + FOLDERS
"""Every entry a worker sees, for a sandbox that binds each on its own instead."""
_Key = tuple[int, int, int]


def _key(path: Path) -> _Key | None:
    """What says `path` changed; None when it is not a file there."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino) if path.is_file() else None


class EtcCopy:
    """The copy in `folder`, for workers under `uids` (None: the launcher's own)."""

    def __init__(self, folder: Path, uids: range | None = None) -> None:
        self.folder = folder
        self.uids = uids
        self._seen: dict[str, _Key | None] = {}

    def folders(self) -> list[str]:
        """The host folders mounted over their (empty) place in the copy."""
        return [f"/etc/{name}" for name in FOLDERS if os.path.isdir(f"/etc/{name}")]

    def refresh(self) -> Path:
        """Bring the copy up to date with the host; returns its folder. Blocking file I/O.

        Raises:
            OSError: the folder cannot be written.
        """
        self.folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        for name in FOLDERS:
            if os.path.isdir(f"/etc/{name}"):
                (self.folder / name).mkdir(mode=0o755, parents=True, exist_ok=True)
        for name in FILES:
            source, copy = Path("/etc") / name, self.folder / name
            key = _key(source)
            if name in self._seen and self._seen[name] == key:
                continue
            self._replace(source, copy, key is not None)
            if name in ("passwd", "group") and key is not None and self.uids is not None:
                self._add_workers(copy, name)
            self._seen[name] = key
        return self.folder

    def _replace(self, source: Path, copy: Path, present: bool) -> None:
        if not present:
            with contextlib.suppress(FileNotFoundError):
                copy.unlink()
            return
        copy.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        new = copy.with_name(copy.name + ".new")
        shutil.copyfile(source, new)  # the content, where it is a link (localtime)
        new.chmod(0o644)
        os.replace(new, copy)

    def _add_workers(self, copy: Path, name: str) -> None:
        assert self.uids is not None
        line = ("cairn-{0}:x:{0}:{0}:cairn worker:/nonexistent:/usr/sbin/nologin\n"
                if name == "passwd" else "cairn-{0}:x:{0}:\n")
        text = copy.read_text(encoding="utf-8", errors="replace")
        if text and not text.endswith("\n"):
            text += "\n"
        copy.write_text(text + "".join(line.format(uid) for uid in self.uids),
                        encoding="utf-8")
