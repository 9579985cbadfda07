"""`cairn bundle --from FILE [--data DIR]`: a bundle of a recipe file (see `cairn.bundles.
from_recipe`); AICR's layout for an AICR recipe with the helm deployer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from cairn.bundles import render_aicr, render_files
from cairn.bundles.attestation import attest
from cairn.bundles.from_recipe import plan_from_result
from cairn.bundles.model import BundleManifest, Deployer
from cairn.bundles.options import GitTarget
from cairn.bundles.plan import BundlePlan
from cairn.evidence.keys import SigningKey
from cairn.recipes.aicr.convert import read_recipe_source, result_document
from cairn.recipes.aicr.datadir import read_data_dir


def render_from_file(path: Path, data_dir: Path | None, deployer: Deployer,
                     overrides: Sequence[str], sets: Sequence[str], git: GitTarget,
                     key: SigningKey | None, *,
                     cluster_selector: Mapping[str, str] | None = None,
                     upgrade_from: BundleManifest | None = None,
                     ) -> tuple[BundlePlan, dict[str, bytes]]:
    """The plan and every file of the bundle of the recipe in `path`."""
    result, kind = read_recipe_source(path)
    files = read_data_dir(data_dir).files if data_dir is not None else None
    shown = str(path)
    aicr_layout = kind == "aicr" and deployer == "helm"
    plan = plan_from_result(result, deployer, shown, files, overrides, sets,
                            charts_only=not aicr_layout, cluster_selector=cluster_selector,
                            upgrade_from=upgrade_from)
    if not aicr_layout:
        return plan, render_files(plan, git, sign_with=key)
    manifests = render_aicr.manifest_files(result, files, shown)
    rendered = render_aicr.render(plan, result, result_document(result), manifests)
    if key is not None:
        attest(rendered, plan.manifest, key)
    return plan, rendered
