"""A recipe's evidence status across sites and signers, the way AICR's dashboard shows it.

Only bundles that verify (any age), are signed by a trusted key and attest the recipe as it
resolves now (same recipe digest) count; for each signer and site the newest one counts.

    CONFIRMED  two or more independent trusted signers passed, none failed
    SINGLE     one trusted signer passed, none failed
    CONTESTED  some passed and some failed
    FAILING    only failures
    UNTESTED   no counting evidence
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from cairn.errors import CairnError
from cairn.evidence.bundle import BundleFiles, read_bundle
from cairn.evidence.statement import recipe_digest
from cairn.evidence.trust import TrustList
from cairn.evidence.verify import Verification, verify_bundle

log = logging.getLogger("cairn.evidence")

State = Literal["CONFIRMED", "SINGLE", "CONTESTED", "FAILING", "UNTESTED"]
EVIDENCE_DIR = "evidence"
"""Inside a recipe catalog: evidence/<recipe>/<bundle dir or tarball> (for review)."""


@dataclass(frozen=True)
class Attestation:
    """One counted (or refused) bundle, as the dashboard lists it."""

    site: str
    signers: tuple[str, ...]
    result: str
    validated_at: datetime | None
    hardware: tuple[str, ...]
    source: str
    counted: bool
    why_not: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "signers": list(self.signers), "result": self.result,
                "validated_at": self.validated_at.isoformat() if self.validated_at else None,
                "hardware": list(self.hardware), "source": self.source,
                "counted": self.counted, "why_not": self.why_not or None}


@dataclass(frozen=True)
class RecipeEvidence:
    recipe: str
    state: State
    signers: tuple[str, ...] = ()
    """Trusted signers whose newest counted evidence passed."""
    hardware: tuple[str, ...] = ()
    """Hardware the counted evidence was produced on."""
    attestations: tuple[Attestation, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "signers": list(self.signers),
                "hardware": list(self.hardware),
                "attestations": [a.to_dict() for a in self.attestations]}


def attestation_of(result: Verification, recipe: str, digest: str, source: str) -> Attestation:
    statement = result.statement
    if statement is None:
        return Attestation(site="?", signers=(), result="?", validated_at=None, hardware=(),
                           source=source, counted=False,
                           why_not=result.failed()[0].reason if result.failed() else "invalid")
    cairn = statement.predicate.cairn
    why_not = ""
    if cairn.recipe != recipe:
        why_not = f"attests {cairn.recipe}"
    elif cairn.recipe_digest != digest:
        why_not = "attests an older version of the recipe"
    elif not result.valid:
        broken = next(c for c in result.failed() if c.name != "result")
        why_not = f"{broken.name}: {broken.reason}"
    return Attestation(site=cairn.site, signers=tuple(s.name for s in result.signers),
                       result=statement.predicate.result, validated_at=cairn.validated_at,
                       hardware=tuple(cairn.hardware), source=source, counted=not why_not,
                       why_not=why_not)


def summarise(recipe: str, attestations: Iterable[Attestation]) -> RecipeEvidence:
    """The state from attestations: per (signer, site), the newest counted one."""
    listed = sorted(attestations, key=lambda a: (a.validated_at is None, a.validated_at))
    newest: dict[tuple[str, str], Attestation] = {}
    for item in listed:
        if item.counted:
            for signer in item.signers:
                newest[(signer, item.site)] = item
    passed = {k: a for k, a in newest.items() if a.result in ("PASSED", "WARNED")}
    failed = {k: a for k, a in newest.items() if a.result == "FAILED"}
    passing_signers = tuple(sorted({signer for signer, _ in passed}))
    state: State
    if passed and failed:
        state = "CONTESTED"
    elif len(passing_signers) >= 2:
        state = "CONFIRMED"
    elif passed:
        state = "SINGLE"
    elif failed:
        state = "FAILING"
    else:
        state = "UNTESTED"
    hardware = tuple(sorted({h for a in newest.values() for h in a.hardware}))
    return RecipeEvidence(recipe=recipe, state=state, signers=passing_signers,
                          hardware=hardware, attestations=tuple(listed))


def recipe_evidence(recipe: str, resolved: Mapping[str, Any],
                    bundles: Iterable[tuple[str, BundleFiles]], trust: TrustList, *,
                    now: datetime) -> RecipeEvidence:
    """The recipe's evidence status from (source, bundle) pairs."""
    digest = recipe_digest(resolved)
    return summarise(recipe, [attestation_of(verify_bundle(files, trust, now=now), recipe,
                                             digest, source) for source, files in bundles])


def catalog_bundles(catalog_root: Path | None, recipe: str) -> list[tuple[str, BundleFiles]]:
    """Bundles placed in the catalog for review: evidence/<recipe>/* (dirs or tarballs);
    an unreadable one is skipped with a warning."""
    if catalog_root is None:
        return []
    folder = catalog_root / EVIDENCE_DIR / recipe
    found: list[tuple[str, BundleFiles]] = []
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        try:
            found.append((str(entry), read_bundle(entry)))
        except CairnError as exc:
            log.warning("skipping %s: %s", entry, exc)
    return found
