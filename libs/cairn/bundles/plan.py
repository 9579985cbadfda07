"""From a resolved recipe to a bundle plan: components in order, with composed values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cairn.bundles.k0rdent_target import k0rdent_target
from cairn.bundles.layers import apply_override_file, apply_set, from_recipe
from cairn.bundles.model import (
    BundleManifest,
    Deployer,
    PlannedComponent,
    ProvenanceFile,
)
from cairn.bundles.order import deploy_order
from cairn.bundles.text import sort_keys
from cairn.errors import InvalidInput
from cairn.recipes import Catalog, resolve


@dataclass(frozen=True)
class BundlePlan:
    manifest: BundleManifest
    provenance: ProvenanceFile


def plan_bundle(catalog: Catalog, recipe_name: str, deployer: Deployer,
                overrides: Sequence[str] = (), sets: Sequence[str] = (), *,
                cluster_selector: Mapping[str, str] | None = None,
                upgrade_from: BundleManifest | None = None) -> BundlePlan:
    """Resolve `recipe_name` and lay out what a bundle of it deploys.

    Args:
        overrides: `--values` files, applied in order after the recipe's values.
        sets: `--set COMPONENT.key=VALUE` assignments, applied last, in order.
        cluster_selector: k0rdent: the labels that select clusters (default: from the
            recipe's criteria; see `cairn.bundles.k0rdent_target`).
        upgrade_from: k0rdent: the manifest of the bundle the clusters run now, where each
            component's upgrade chain starts.

    Raises:
        NotFound: no such recipe.
        InvalidInput: a bad override file or assignment, a component without a chart, or a
            dependency cycle.
    """
    recipe = resolve(catalog, recipe_name)
    composed = from_recipe(recipe, catalog)
    for path in overrides:
        apply_override_file(composed, Path(path), path)
    for assignment in sets:
        apply_set(composed, assignment)
    by_name = {c.name: c for c in recipe.components}
    if not by_name:
        raise InvalidInput(f"recipe {recipe.name!r} deploys no components (a bundle is for "
                           "Kubernetes recipes)", field="recipe")
    for component in recipe.components:
        if not (component.chart and component.version and component.repository):
            raise InvalidInput(
                f"component {component.name!r} needs a chart, a repository and a version; a "
                "bundle deploys Helm charts at pinned versions",
                field=f"components.{component.name}")
    order = deploy_order({c.name: c.dependencies for c in recipe.components})
    planned = []
    for name, wave in order:
        source = by_name[name]
        planned.append(PlannedComponent(
            name=name,
            chart=source.chart,
            repository=source.repository,
            version=source.version,
            namespace=source.namespace or name,
            dependencies=sorted(d for d in set(source.dependencies) if d in by_name),
            wave=wave,
            values=sort_keys(composed.values[name]),
        ))
    target = (k0rdent_target(recipe.criteria, planned, cluster_selector, upgrade_from)
              if deployer == "k0rdent" else None)
    manifest = BundleManifest(recipe=recipe.name, applied=list(recipe.applied),
                              deployer=deployer, overrides=list(overrides), sets=list(sets),
                              components=planned, k0rdent=target)
    return BundlePlan(manifest=manifest,
                      provenance=ProvenanceFile(recipe=recipe.name, values=composed.rows()))
