"""The recipe digest: one sha256 over what a bundle deploys, the same for every deployer.

It covers the recipe's name and every component as planned (chart, repository, version,
namespace, dependencies, wave and final values), so two bundles of the same recipe, overrides
and `--set`, one for Helm and one for Pulumi, carry the same digest, and any change to what
reaches a cluster changes it. Pulumi exports it as a stack output; k0rdent's
MultiClusterService carries it as the `cairn.dev/recipe-digest` annotation.
"""

from __future__ import annotations

import hashlib

import msgspec

from cairn.bundles.model import BundleManifest


def recipe_digest(manifest: BundleManifest) -> str:
    """`sha256:<hex>` of the recipe name and the planned components (canonical JSON)."""
    content = {"recipe": manifest.recipe,
               "components": [msgspec.to_builtins(c) for c in manifest.components]}
    data = msgspec.json.encode(content, order="deterministic")
    return "sha256:" + hashlib.sha256(data).hexdigest()
