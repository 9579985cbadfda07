"""Reading a bundle's manifest and provenance back (strictly: they are Cairn's own files)."""

from __future__ import annotations

from pathlib import Path

from cairn import yamlfile
from cairn.bundles.model import MANIFEST_FILE, PROVENANCE_FILE, BundleManifest, ProvenanceFile
from cairn.errors import NotFound


def _file(root: Path, name: str) -> Path:
    if not root.is_dir():
        raise NotFound("no such bundle directory", file=str(root))
    path = root / name
    if not path.is_file():
        raise NotFound(f"no {name}: not a Cairn bundle", file=str(root))
    return path


def read_manifest(root: Path) -> BundleManifest:
    """`root/bundle.yaml`.

    Raises:
        NotFound: not a bundle directory.
        InvalidInput: the manifest is malformed (file, line and field).
    """
    return yamlfile.load(_file(root, MANIFEST_FILE), BundleManifest)


def read_provenance(root: Path) -> ProvenanceFile:
    """`root/provenance.yaml` (same errors as `read_manifest`)."""
    return yamlfile.load(_file(root, PROVENANCE_FILE), ProvenanceFile)
