"""A bundle plan from a recipe file (`cairn bundle --from FILE`): AICR's `RecipeResult` or a
resolved Cairn recipe, no catalog needed.

Values follow AICR (`cairn.recipes.aicr.convert.component_values`): values files come from
the AICR data directory given with `--data` (a recipe file names them by path only), then
the ref's overrides; `--values` and `--set` go on top as for any bundle. A component switched
off (`overrides.enabled: false`) is not deployed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from cairn.bundles.k0rdent_target import k0rdent_target
from cairn.bundles.layers import ComposedValues, apply_override_file, apply_set
from cairn.bundles.model import BundleManifest, Deployer, PlannedComponent, ProvenanceFile
from cairn.bundles.order import deploy_order
from cairn.bundles.plan import BundlePlan
from cairn.bundles.text import sort_keys
from cairn.errors import InvalidInput
from cairn.recipes.aicr.convert import component_values
from cairn.recipes.aicr.model import RecipeResult
from cairn.recipes.model import Criteria


def recipe_label(result: RecipeResult, shown: str) -> str:
    """What the bundle calls its recipe: the last overlay applied, else the file's stem."""
    applied = result.metadata.applied_overlays
    return applied[-1] if applied else Path(shown).stem


def plan_from_result(result: RecipeResult, deployer: Deployer, shown: str,
                     files: Mapping[str, bytes] | None, overrides: Sequence[str] = (),
                     sets: Sequence[str] = (), *, charts_only: bool = True,
                     cluster_selector: Mapping[str, str] | None = None,
                     upgrade_from: BundleManifest | None = None) -> BundlePlan:
    """Lay out what a bundle of `result` deploys, in its deployment order.

    Args:
        files: the AICR data's files (values files, manifests), or None.
        charts_only: refuse components without a chart (every deployer but AICR's Helm
            layout, which deploys manifest-only components as local charts).
        cluster_selector, upgrade_from: k0rdent, as for `plan_bundle`; the default selector
            comes from the recipe's criteria.

    Raises:
        InvalidInput: nothing to deploy, a values file that is not in `files`, a component
            without a chart or version where one is needed, or a bad override.
    """
    refs = {r.name: r for r in result.component_refs if r.enabled}
    if not refs:
        raise InvalidInput("the recipe deploys no components", file=shown,
                           field="componentRefs")
    composed = ComposedValues(values={name: {} for name in refs})
    for name, ref in refs.items():
        composed.merge(name, component_values(ref, files, shown), "overlay", shown)
    for path in overrides:
        apply_override_file(composed, Path(path), path)
    for assignment in sets:
        apply_set(composed, assignment)
    if charts_only:
        missing = [n for n, r in refs.items() if not (r.source and r.version)]
        if missing:
            raise InvalidInput(
                f"the {deployer} deployer needs a chart source and a pinned version for every "
                f"component; {', '.join(missing)} has none (manifest-only or unpinned; the "
                "helm deployer renders those from an AICR recipe)", file=shown,
                field=f"componentRefs.{missing[0]}")
    waves = dict(deploy_order({n: r.dependency_refs for n, r in refs.items()}))
    order = [n for n in result.deployment_order if n in refs] or sorted(refs)
    order += sorted(n for n in refs if n not in order)
    planned = []
    for name in order:
        ref = refs[name]
        chart = ref.chart or name
        planned.append(PlannedComponent(
            name=name, chart=chart, repository=ref.source, version=ref.version,
            namespace=ref.namespace or name,
            dependencies=sorted(d for d in set(ref.dependency_refs) if d in refs),
            wave=waves[name], values=sort_keys(composed.values[name])))
    label = recipe_label(result, shown)
    target = None
    if deployer == "k0rdent":
        c = result.criteria
        criteria = Criteria(service=c.service or "any", accelerator=c.accelerator or "any",
                            os=c.os or "any", intent=c.intent or "any",
                            platform=c.platform or "any", nodes=c.nodes)
        target = k0rdent_target(criteria, planned, cluster_selector, upgrade_from)
    manifest = BundleManifest(recipe=label, applied=list(result.metadata.applied_overlays),
                              deployer=deployer, overrides=list(overrides), sets=list(sets),
                              components=planned, k0rdent=target)
    return BundlePlan(manifest=manifest,
                      provenance=ProvenanceFile(recipe=label, values=composed.rows()))
