"""Deployment bundles: one recipe rendered for Helm, Argo CD, Flux, Helmfile, Pulumi or k0rdent.

    plan = plan_bundle(catalog, "h100-eks-ubuntu-training", "flux", overrides=["site.yaml"])
    files = render_files(plan, GitTarget(path="clusters/prod"))   # path -> bytes, pure
    write_bundle(files, Path("out"))
    verify(Path("out")).ok                   # checksums.txt is the complete inventory
    diff_bundles(read_manifest(old), read_manifest(new))

Not to be confused with `cairn.codebundle`, which packs a job's code.
"""

from cairn.bundles.build import render_files, write_bundle
from cairn.bundles.checksums import Verification, verify
from cairn.bundles.diff import BundleDiff, diff_bundles, diff_markdown
from cairn.bundles.model import (
    DEPLOYERS,
    LAYERS,
    BundleManifest,
    Deployer,
    PlannedComponent,
    ProvenanceFile,
    ValueOrigin,
)
from cairn.bundles.options import GitTarget
from cairn.bundles.plan import BundlePlan, plan_bundle
from cairn.bundles.reading import read_manifest, read_provenance

__all__ = [
    "DEPLOYERS",
    "LAYERS",
    "BundleDiff",
    "BundleManifest",
    "BundlePlan",
    "Deployer",
    "GitTarget",
    "PlannedComponent",
    "ProvenanceFile",
    "ValueOrigin",
    "Verification",
    "diff_bundles",
    "diff_markdown",
    "plan_bundle",
    "read_manifest",
    "read_provenance",
    "render_files",
    "verify",
    "write_bundle",
]
