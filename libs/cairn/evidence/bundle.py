"""Evidence bundles: the signed statement and the files it names, as a directory or tarball.

    attestation.dsse.json   DSSE envelope around the in-toto statement (see statement.py)
    snapshot.json           the snapshot the site was judged on
    recipe.resolved.yaml    the resolved recipe it was judged against
    ctrf/<phase>.json       one CTRF report per phase
    manifest.json           {"format": 1, "files": {path: sha256}} of every other file

The statement's subjects are the content files (snapshot, recipe, CTRF) by sha256, so the
signature covers them; the manifest lists every file including the attestation, so a file
added or removed is noticed. A bundle packs into a gzipped tarball with fixed metadata, so
the same bundle always packs to the same bytes and its sha256 names it in the object store.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec
import yaml

import cairn
from cairn.errors import InvalidInput, NotFound
from cairn.evidence import dsse
from cairn.evidence.keys import SigningKey
from cairn.evidence.statement import (
    CairnPredicate,
    ResourceDescriptor,
    ResultPredicate,
    Statement,
    encode_statement,
    hardware_lines,
    outcome_ids,
    overall_result,
    recipe_digest,
    sha256_hex,
    site_fingerprint,
)
from cairn.files import read_bytes
from cairn.snapshot import Snapshot
from cairn.snapshot import encode as encode_snapshot

ATTESTATION = "attestation.dsse.json"
SNAPSHOT = "snapshot.json"
RECIPE = "recipe.resolved.yaml"
MANIFEST = "manifest.json"
CTRF_DIR = "ctrf"
MANIFEST_FORMAT = 1
MAX_FILES = 256
MAX_ENTRIES = 4 * MAX_FILES
"""Files and folders together, in a tarball or a bundle folder."""
MAX_BYTES = 64 * 1024 * 1024

BundleFiles = dict[str, bytes]
"""A bundle in memory: relative POSIX path -> content."""


@dataclass(frozen=True)
class ValidationOutcome:
    """What one finished validation run gives the signer."""

    site: str
    recipe: str
    resolved: Mapping[str, Any]
    """The resolved recipe as builtins (no provenance)."""
    snapshot: Snapshot | None
    ctrf: Mapping[str, Mapping[str, Any]]
    """Phase -> its CTRF document, in the order the phases ran."""
    phases: Mapping[str, str]
    passed: bool
    validated_at: datetime
    run: str = ""


def build_bundle(outcome: ValidationOutcome, keys: Iterable[SigningKey]) -> BundleFiles:
    """Write the bundle's files for `outcome` and sign its statement with each key."""
    files: BundleFiles = {}
    if outcome.snapshot is not None:
        files[SNAPSHOT] = encode_snapshot(outcome.snapshot)
    files[RECIPE] = yaml.safe_dump(dict(outcome.resolved), sort_keys=False).encode()
    for phase, doc in outcome.ctrf.items():
        files[f"{CTRF_DIR}/{phase}.json"] = (json.dumps(doc, indent=2) + "\n").encode()
    subjects = [ResourceDescriptor(name=path, digest={"sha256": sha256_hex(data)})
                for path, data in sorted(files.items())]
    passed_ids, warned_ids, failed_ids = outcome_ids(outcome.ctrf)
    digest = recipe_digest(outcome.resolved)
    predicate = ResultPredicate(
        result=overall_result(outcome.passed, warned_ids),
        configuration=[ResourceDescriptor(name=outcome.recipe, uri=RECIPE,
                                          digest={"sha256": digest})],
        passed_tests=passed_ids, warned_tests=warned_ids, failed_tests=failed_ids,
        cairn=CairnPredicate(
            site=outcome.site, recipe=outcome.recipe, run=outcome.run, recipe_digest=digest,
            validated_at=outcome.validated_at,
            snapshot_digest=outcome.snapshot.digest if outcome.snapshot else "",
            snapshot_taken_at=outcome.snapshot.taken_at if outcome.snapshot else None,
            ctrf={phase: sha256_hex(files[f"{CTRF_DIR}/{phase}.json"]) for phase in outcome.ctrf},
            phases=dict(outcome.phases), validator_version=cairn.__version__,
            site_fingerprint=site_fingerprint(outcome.snapshot),
            hardware=hardware_lines(outcome.snapshot)))
    statement = Statement(subject=subjects, predicate=predicate)
    envelope = dsse.sign(encode_statement(statement), dsse.IN_TOTO_PAYLOAD_TYPE, keys)
    files[ATTESTATION] = msgspec.json.format(dsse.encode_envelope(envelope)) + b"\n"
    files[MANIFEST] = manifest_of(files)
    return files


def cosign_bundle(files: Mapping[str, bytes], key: SigningKey) -> BundleFiles:
    """The bundle with `key`'s signature added to its envelope (e.g. the federation's)."""
    envelope = dsse.decode_envelope(files[ATTESTATION], source=ATTESTATION)
    out = {k: v for k, v in files.items() if k != MANIFEST}
    out[ATTESTATION] = msgspec.json.format(
        dsse.encode_envelope(dsse.add_signature(envelope, key))) + b"\n"
    out[MANIFEST] = manifest_of(out)
    return out


def manifest_of(files: Mapping[str, bytes]) -> bytes:
    """manifest.json for every file but the manifest itself."""
    listed = {path: sha256_hex(data) for path, data in sorted(files.items()) if path != MANIFEST}
    return (json.dumps({"format": MANIFEST_FORMAT, "files": listed}, indent=2) + "\n").encode()


def pack(files: Mapping[str, bytes]) -> bytes:
    """A gzipped tarball of the bundle; equal bundles give equal bytes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def bundle_digest(files: Mapping[str, bytes]) -> str:
    """The bundle's name in the object store: sha256 of its packed bytes."""
    return sha256_hex(pack(files))


def unpack(data: bytes, *, source: str = "<tarball>") -> BundleFiles:
    """The files of a (gzipped) tarball: regular files only, no path outside the bundle.

    Raises:
        InvalidInput: not a tarball, a link or device, a path escaping the bundle, too big.
    """
    files: BundleFiles = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            entries = 0
            for member in tar:
                entries += 1  # folders too: a tarball of nothing but folders is not free
                if entries > MAX_ENTRIES:
                    raise InvalidInput(f"bundle has more than {MAX_ENTRIES} entries",
                                       file=source)
                if member.isdir():
                    continue
                if not member.isfile():
                    raise InvalidInput(f"{member.name} is not a regular file", file=source)
                path = _safe_path(member.name, source)
                _check_size(files, member.size, source)
                extracted = tar.extractfile(member)
                assert extracted is not None  # a regular file always has content
                files[path] = extracted.read()
    except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as exc:
        # tarfile's message lists every compression it tried, over several lines.
        first = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
        raise InvalidInput(f"not a bundle tarball ({first})", file=source) from None
    return files


def read_bundle(path: Path) -> BundleFiles:
    """A bundle from a directory or a tarball, read bounded (`cairn.files`).

    Raises:
        NotFound: no such path.
        InvalidInput: unreadable, not a regular file or folder, a link or special file
            inside, or too big.
    """
    if path.is_dir():
        return _read_dir(path)
    if not path.exists() and not path.is_symlink():
        raise NotFound(f"no evidence bundle at {path}", file=str(path))
    return unpack(read_bytes(path, limit=MAX_BYTES), source=str(path))


def _read_dir(root: Path) -> BundleFiles:
    items: list[Path] = []
    for item in root.rglob("*"):
        items.append(item)
        if len(items) > MAX_ENTRIES:
            raise InvalidInput(f"bundle has more than {MAX_ENTRIES} entries", file=str(root))
    files: BundleFiles = {}
    for item in sorted(items):
        rel = item.relative_to(root).as_posix()
        if item.is_symlink():
            raise InvalidInput(f"{rel} is a symbolic link", file=str(root))
        if item.is_dir():
            continue
        if not item.is_file():
            raise InvalidInput(f"{rel} is not a regular file", file=str(root))
        _check_size(files, item.stat().st_size, str(root))
        used = sum(map(len, files.values()))
        files[rel] = read_bytes(item, limit=MAX_BYTES - used, shown=str(item))
    return files


def write_dir(files: Mapping[str, bytes], root: Path) -> None:
    """Write the bundle's files under `root` (created)."""
    try:
        for rel, data in files.items():
            target = root / _safe_path(rel, str(root))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    except OSError as exc:
        raise InvalidInput(f"cannot write: {exc.strerror or exc}", file=str(root)) from None


def _safe_path(name: str, source: str) -> str:
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise InvalidInput(f"{name!r} points outside the bundle", file=source)
    return pure.as_posix()


def _check_size(files: BundleFiles, size: int, source: str) -> None:
    if len(files) >= MAX_FILES or sum(map(len, files.values())) + size > MAX_BYTES:
        raise InvalidInput(f"bundle is larger than {MAX_FILES} files or {MAX_BYTES} bytes",
                           file=source)
