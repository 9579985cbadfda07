"""Rendering a bundle (pure: plan in, file texts out) and writing it to a directory."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import msgspec

from cairn.bundles import (
    render_argocd,
    render_flux,
    render_helm,
    render_helmfile,
    render_k0rdent,
    render_pulumi,
)
from cairn.bundles.attestation import attest
from cairn.bundles.checksums import checksums_text
from cairn.bundles.fingerprint import recipe_digest
from cairn.bundles.model import CHECKSUMS_FILE, MANIFEST_FILE, PROVENANCE_FILE
from cairn.bundles.options import GitTarget
from cairn.bundles.plan import BundlePlan
from cairn.bundles.readme import readme
from cairn.bundles.text import GENERATED, dump_yaml
from cairn.errors import Conflict, InvalidInput
from cairn.evidence.keys import SigningKey


def render_files(plan: BundlePlan, git: GitTarget | None = None,
                 sign_with: SigningKey | None = None) -> dict[str, bytes]:
    """Every file of the bundle, checksums.txt included, by relative path.

    With `sign_with`, also `attestation.dsse.json`: a signed statement over every file.

    Raises:
        InvalidInput: argocd without `git.repo_url` (the app-of-apps must point somewhere).
    """
    git = git or GitTarget()
    manifest = plan.manifest
    if manifest.deployer == "argocd":
        if not git.repo_url:
            raise InvalidInput("the argocd deployer needs the Git repository the bundle is "
                               "committed to (--repo-url)", field="repo-url")
        texts = render_argocd.render(manifest, git)
    elif manifest.deployer == "flux":
        texts = render_flux.render(manifest, git)
    elif manifest.deployer == "helmfile":
        texts = render_helmfile.render(manifest)
    elif manifest.deployer == "pulumi":
        texts = render_pulumi.render(manifest, recipe_digest(manifest))
    elif manifest.deployer == "k0rdent":
        texts = render_k0rdent.render(manifest, recipe_digest(manifest))
    else:
        texts = render_helm.render(manifest)
    written = msgspec.to_builtins(manifest)
    if written.get("k0rdent") is None:
        written.pop("k0rdent", None)  # only k0rdent bundles have a cluster selector
    texts[MANIFEST_FILE] = dump_yaml(written, GENERATED)
    texts[PROVENANCE_FILE] = dump_yaml(msgspec.to_builtins(plan.provenance), GENERATED)
    texts["README.md"] = readme(manifest, git)
    files = {path: text.encode("utf-8") for path, text in texts.items()}
    files[CHECKSUMS_FILE] = checksums_text(files).encode("utf-8")
    if sign_with is not None:
        attest(files, manifest, sign_with)
    return files


def write_bundle(files: dict[str, bytes], out: Path, *, force: bool = False) -> None:
    """Write `files` under `out` as a whole: built beside it, then moved into place.

    Raises:
        Conflict: `out` exists and is not empty, unless `force` and it is a bundle.
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise Conflict("exists and is not empty (use --force to replace a bundle)",
                           file=str(out))
        if not (out / CHECKSUMS_FILE).is_file():
            raise Conflict("exists and is not a bundle (no checksums.txt); not replacing it",
                           file=str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for rel, data in files.items():
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            os.chmod(target, 0o755 if rel.endswith(".sh") else 0o644)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
