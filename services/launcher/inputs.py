"""What a launch takes from the site and the bus: the job's code bundle, the secrets the
site's runtime file names, and a worker's captured log."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from cairn import subjects
from cairn.bus import Bus, objects
from cairn.errors import InvalidInput, NotFound


async def code_bundle(bus: Bus, workdir: Path, study: str, digest: str | None) -> Path:
    """The job's code bundle unpacked under the site workdir, cached per digest (a worker
    never sees another copy than the one its digest names)."""
    if not digest:
        empty = workdir / "bundles" / "empty"
        empty.mkdir(parents=True, exist_ok=True)
        return empty
    dest = workdir / "bundles" / digest
    if (dest / ".complete").exists():
        return dest
    store = await objects(bus, subjects.obj_artifacts(study))
    try:
        data = await store.get(digest, digest=digest)
    except NotFound:
        raise InvalidInput(f"code bundle {digest[:12]} is not in artifacts_{study}") from None
    from cairn.codebundle import unpack

    tmp = dest.with_name(digest + f".tmp{os.getpid()}")
    await asyncio.to_thread(unpack, data, tmp)
    if not dest.exists():
        tmp.rename(dest)
    (dest / ".complete").touch()
    return dest


def read_from(path: Path, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes of a worker's log; empty when there is none. No link is followed
    and nothing but a regular file is read: a worker may replace its log with a link to the
    site's credentials."""
    from cairn.launcher.backends._workdir import read_file

    try:
        return read_file(path, offset, limit)
    except OSError:
        return b""


def resolve_secrets(refs: dict[str, str]) -> dict[str, str]:
    """Resolve secret references on the site, at launch: `env:NAME` or `file:/path`."""
    out: dict[str, str] = {}
    for name, ref in refs.items():
        kind, _, where = ref.partition(":")
        if kind == "env":
            value = os.environ.get(where)
            if value is None:
                raise InvalidInput(f"secret {name}: the launcher's environment has no {where}",
                                   field=f"secret_env.{name}")
            out[name] = value
        elif kind == "file":
            try:
                out[name] = Path(where).read_text(encoding="utf-8").rstrip("\n")
            except OSError as exc:
                raise InvalidInput(f"secret {name}: cannot read {where}: {exc.strerror}",
                                   field=f"secret_env.{name}") from None
        else:
            raise InvalidInput(f"secret {name}: {kind!r} secrets need the kubernetes backend",
                               field=f"secret_env.{name}")
    return out
