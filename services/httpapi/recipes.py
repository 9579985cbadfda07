"""The recipe catalog as the API and the dashboard show it: filtered by the five criteria
(and nodes), each recipe with its evidence status, hardware, checks and signers.

A recipe's status is `cairn.evidence.dashboard.recipe_evidence` over the bundles in the
catalog's evidence folder and those the federation recorded, verified against the trust
list. It is computed only for recipes that have any evidence (the others are UNTESTED
without resolving them) and again only when new evidence is recorded.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from cairn.bus import Bus
from cairn.errors import CairnError, InvalidInput, NotFound
from cairn.evidence.bundle import BundleFiles
from cairn.evidence.dashboard import RecipeEvidence, catalog_bundles, recipe_evidence
from cairn.evidence.store import fetch_bundle
from cairn.evidence.trust import TrustList, load_trust
from cairn.httpapi.models import RecipeExplained, RecipeSummary
from cairn.recipes import PHASES, Catalog, load_catalog, resolve
from cairn.recipes.catalog import RecipeEntry
from cairn.recipes.model import CRITERIA_FIELDS

log = logging.getLogger("cairn.httpapi")

FILTERS = (*CRITERIA_FIELDS[:5], "nodes")
"""The catalog's filters: service, accelerator, os, intent, platform (and nodes)."""


class RecipeCatalog:
    def __init__(self, catalog: Catalog, trust: TrustList) -> None:
        self.catalog = catalog
        self.trust = trust
        self._status: dict[str, RecipeEvidence] = {}
        self._checks: dict[str, list[str]] = {}
        """The checks of each recipe resolved for its evidence (with its bases' and
        mixins'); others show the checks their own file names."""
        self._generation = -1

    @classmethod
    def load(cls, root: str | None, trust_file: str | None) -> RecipeCatalog:
        trust = load_trust(Path(trust_file)) if trust_file and Path(trust_file).exists() \
            else TrustList()
        return cls(load_catalog(Path(root) if root else None), trust)

    def entries(self, **given: str | int | None) -> list[RecipeEntry]:
        """Overlays whose own criteria are those given (a value not in the catalog's
        criteria is an `InvalidInput` naming the filter)."""
        want: dict[str, str] = {}
        for name in CRITERIA_FIELDS[:5]:
            value = given.get(name)
            if value not in (None, ""):
                want[name] = self.catalog.criteria.value(name, str(value),
                                                         where=f"query parameter {name}")
        nodes = given.get("nodes")
        return [e for e in sorted(self.catalog.overlays.values(), key=lambda e: e.name)
                if all(getattr(e.spec.criteria, k) == v for k, v in want.items())
                and (nodes is None or e.spec.criteria.nodes == nodes)]

    def entry(self, name: str) -> RecipeEntry:
        found = self.catalog.overlays.get(name)
        if found is None:
            raise NotFound(f"no recipe {name} in the catalog", field="name")
        return found

    def summary(self, entry: RecipeEntry) -> RecipeSummary:
        status = self._status.get(entry.name)
        phases = [getattr(entry.spec.validation, p, None) for p in PHASES]
        checks = self._checks.get(entry.name) or sorted(
            {str(getattr(c, "name", "")) for phase in phases
             for c in getattr(phase, "checks", None) or ()} - {""})
        return RecipeSummary(
            name=entry.name, description=entry.spec.description,
            criteria=msgspec.to_builtins(entry.spec.criteria, order="deterministic"),
            status=status.state if status else "UNTESTED",
            signers=list(status.signers) if status else [],
            hardware=list(status.hardware) if status else [], checks=checks)

    async def refresh(self, bus: Bus, evidence: list[tuple[str, str]], generation: int
                      ) -> None:
        """Compute the statuses again when evidence changed: `evidence` is (recipe,
        bundle digest) of every recorded bundle."""
        if generation == self._generation:
            return
        by_recipe: dict[str, list[str]] = {}
        for recipe, bundle in evidence:
            by_recipe.setdefault(recipe, []).append(bundle)
        names = set(by_recipe)
        root = self.catalog.root
        if root is not None and (root / "evidence").is_dir():
            names |= {p.name for p in (root / "evidence").iterdir()}
        status: dict[str, RecipeEvidence] = {}
        checks: dict[str, list[str]] = {}
        for name in sorted(names & set(self.catalog.overlays)):
            bundles: list[tuple[str, BundleFiles]] = list(catalog_bundles(root, name))
            for digest in by_recipe.get(name, []):
                try:
                    bundles.append((f"evidence/{digest}", await fetch_bundle(bus, digest)))
                except CairnError as exc:
                    log.warning("evidence %s of %s: %s", digest, name, exc)
            try:
                found = resolve(self.catalog, name)
            except InvalidInput as exc:
                log.warning("recipe %s does not resolve: %s", name, exc)
                continue
            checks[name] = sorted({c.name for phase in found.validation.values()
                                   for c in phase.checks})
            resolved = msgspec.to_builtins(found)
            resolved.pop("provenance", None)
            status[name] = recipe_evidence(name, resolved, bundles, self.trust,
                                           now=datetime.now(UTC))
        self._status, self._checks = status, checks
        self._generation = generation

    def explain(self, name: str) -> RecipeExplained:
        resolved = resolve(self.catalog, self.entry(name).name)
        return RecipeExplained(name=resolved.name, applied=list(resolved.applied),
                               values=[{"path": ".".join(p.path), "value": p.value,
                                        "file": p.file} for p in resolved.provenance])

    def resolved(self, name: str) -> dict[str, object]:
        data: dict[str, object] = msgspec.to_builtins(resolve(self.catalog,
                                                               self.entry(name).name))
        data.pop("provenance", None)
        return data
