"""A built image archive, kept under the hash of its inputs so the same inputs are built once.

    image = cached_build("cairn", key, out, tag, make=lambda path: write_archive(...))

The cache folder holds `<name>-<key>.tar` and a `.json` beside it (tag, image id, layer digest
and size): a second build with the same inputs and tag is a file copy. `key` is whatever the
builder says its image is made of (deploy/images/worker/build.py's `input_hash`).
Used by deploy/images/cairn/build.py and deploy/images/nats/build.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from imagetar import Archive


@dataclass(frozen=True)
class BuiltArchive:
    """An image archive ready to `docker load`, and whether the cache supplied it."""

    tag: str
    archive: Archive
    input_hash: str
    cached: bool


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cairn" / "images"


def cached_build(name: str, key: str, out: Path, tag: str, make: Callable[[Path], Archive],
                 cache: Path | None = None) -> BuiltArchive:
    """The archive for `key` at `out`: copied from the cache, else made by `make(out)` and
    cached (written to a temporary name first, so a crash never leaves a half archive)."""
    cache = cache or default_cache()
    cached = cache / f"{name}-{key[:32]}.tar"
    meta = cached.with_suffix(".json")
    if cached.exists() and meta.exists():
        info = json.loads(meta.read_text())
        if info.get("tag") == tag:
            if cached.resolve() != out.resolve():
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cached, out)
            return BuiltArchive(tag=tag, input_hash=key, cached=True, archive=Archive(
                path=out, image_id=info["image_id"], layer_digest=info["layer_digest"],
                size=info["size"]))
    archive = make(out)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache, delete=False) as tmp:
        shutil.copyfile(out, tmp.name)
    os.replace(tmp.name, cached)
    meta.write_text(json.dumps({"tag": tag, "image_id": archive.image_id,
                                "layer_digest": archive.layer_digest, "size": archive.size}))
    return BuiltArchive(tag=tag, archive=archive, input_hash=key, cached=False)


def docker_load(archive: Path, timeout: float = 300) -> None:
    """`docker load` an archive into the engine at DOCKER_HOST."""
    subprocess.run(["docker", "load", "-q", "-i", str(archive)], check=True, timeout=timeout,
                   stdout=subprocess.DEVNULL)
