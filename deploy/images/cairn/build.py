"""Build the Cairn parent image: every service in one image, chosen by its command.

    python deploy/images/cairn/build.py            # writes build/images/cairn.tar
    python deploy/images/cairn/build.py --load     # and `docker load`s it (DOCKER_HOST)
    make images                                     # the worker, parent and NATS images

    docker run cairn:0.1.0 run coordinator validator signer --federation ...
    docker run cairn:0.1.0 run agent launcher snapshotter --site-config ...
    healthcheck: python -m cairn.runtime.health agent launcher   (same flags/env as `cairn run`)

The worker image's root filesystem (deploy/images/worker/build.py: this host's Python,
`cairn` and its dependencies, bytecode, busybox) plus the services (`cairn.coordinator`,
`cairn.agent`, ... mapped from services/ as pyproject.toml's package-dir says), the recipe
catalog (`$CAIRN_RECIPES`), a `cairn` command, `/var/lib/cairn` for state and `/etc/cairn`
for an operator's files. The entrypoint is `cairn`, so the command is what `cairn` is told
(`run agent launcher`, `job list`, ...).

Launchers in this image use the `process` backend: a worker is a child process of the
launcher's container, with this image's Python and packages (numpy included).

Reproducible and cached exactly as the worker image is (same inputs, same image id; the
archive is kept under its input hash, deploy/images/cached.py).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))
from cached import BuiltArchive, cached_build, docker_load  # noqa: E402
from imagetar import Archive, ImageConfig, RootFS, write_archive  # noqa: E402

REPOSITORY = "cairn"
# Bump when the layout changes: it is part of the cache key.
BUILDER_VERSION = "2"
RECIPES = "usr/local/share/cairn/recipes"
CAIRN_SCRIPT = b"""#!/usr/local/bin/python3
import sys
from cairn.cli.main import main
sys.exit(main())
"""


def worker_builder() -> ModuleType:
    """deploy/images/worker/build.py as a module (deploy/ is not a package); the name is the
    one tests/fixtures/docker.py gives it, so both share one copy."""
    name = "cairn_image_build_worker"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE.parent / "worker" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def service_packages() -> dict[str, Path]:
    """`cairn.<name>` -> its folder, for every package pyproject.toml maps outside libs/."""
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    return {pkg: REPO / folder for pkg, folder in sorted(mapping.items()) if pkg != "cairn"}


def api_distributions() -> tuple[str, ...]:
    """The `api` extra's distributions as pyproject.toml lists them now."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    return tuple(re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0] for r in extras["api"])


def assemble() -> tuple[RootFS, list[tuple[str, Path]]]:
    """The parent's root filesystem and the .py files in it to compile."""
    worker = worker_builder()
    root, sources = worker.assemble()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    site = f"{worker.PREFIX}/lib/python{version}/site-packages"
    for package, folder in service_packages().items():
        image_dir = f"{site}/{package.replace('.', '/')}"
        for path in root.add_tree(image_dir, folder):
            if path.endswith(".py"):
                sources.append((path, folder / Path(path).relative_to(image_dir)))
    # The HTTP API's packages (the `api` extra): the parent runs `cairn run httpapi`, a
    # worker never does.
    for dist in worker.distributions(api_distributions()):
        for file in dist.files or []:
            host = Path(str(dist.locate_file(file)))
            if ("__pycache__" in file.parts or file.suffix == ".pyc" or not host.is_file()
                    or file.parts[0] == ".." or file.is_absolute()):
                continue
            image_path = f"{site}/{file.as_posix()}"
            if image_path in root.entries:
                continue  # already in the worker's root (msgspec, PyYAML, click, rich, ...)
            root.add_file(image_path, host)
            if file.suffix == ".py":
                sources.append((image_path, host))
    root.add_bytes(f"{worker.PREFIX}/bin/cairn", CAIRN_SCRIPT, 0o755)
    # The validator's catalog (CAIRN_RECIPES points here); an operator may mount another.
    root.add_tree(RECIPES, REPO / "recipes")
    for folder in ("var/lib/cairn", "etc/cairn"):
        root.add_dir(folder, 0o755)
    return root, sources


def image_config(version: str) -> ImageConfig:
    return ImageConfig(
        entrypoint=["/usr/local/bin/cairn"], cmd=["--help"], workdir="/var/lib/cairn",
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
             "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
             "CAIRN_STATE_DIR": "/var/lib/cairn", "CAIRN_RECIPES": "/" + RECIPES},
        labels={"org.opencontainers.image.title": "cairn",
                "org.opencontainers.image.description": "Cairn services: cairn run SERVICE...",
                "org.opencontainers.image.version": version})


def build(out: Path, *, cache: Path | None = None, tag: str | None = None) -> BuiltArchive:
    """Build the parent image archive at `out` (reused from the cache when inputs match)."""
    worker = worker_builder()
    version = worker.cairn_version()
    tag = tag or f"{REPOSITORY}:{version}"
    root, sources = assemble()
    # The worker builder's hash covers every entry and file; this builder's version joins it.
    key = hashlib.sha256(f"parent {BUILDER_VERSION} {worker.input_hash(root, sources)}"
                         .encode()).hexdigest()

    def make(path: Path) -> Archive:
        worker.add_bytecode(root, sources)
        return write_archive(root, path, tag=tag, config=image_config(version))

    return cached_build("cairn", key, out, tag, make, cache)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the Cairn parent image (no registry).")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "images" / "cairn.tar",
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
