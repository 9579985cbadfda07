"""Evidence events (stream `EVIDENCE`, subject `cairn.evidence.<site>.<recipe>`, append-only).

The signer (or `cairn evidence submit`) stores a signed evidence bundle in the `evidence`
object store under its sha256 and announces it here. The event repeats what eligibility and
the recipe dashboard need, so neither has to fetch the bundle to list it; anyone who wants to
trust it fetches the bundle and verifies it offline.
"""

from __future__ import annotations

from datetime import datetime

from cairn.events.base import Event


class EvidenceRecorded(Event, tag="evidence.recorded", frozen=True, kw_only=True):
    site: str
    recipe: str
    bundle: str
    """sha256 of the packed bundle: its object name in the `evidence` store."""
    attestation_digest: str = ""
    """sha256 of the bundle's attestation.dsse.json."""
    run: str = ""
    """The validation run it attests ("" for a bundle submitted from elsewhere)."""
    result: str = ""
    """The statement's test result: PASSED, WARNED or FAILED."""
    validated_at: datetime | None = None
    recipe_digest: str = ""
    snapshot_digest: str = ""
    site_fingerprint: str = ""
    hardware: list[str] = []
    signers: list[str] = []
    """Key ids of the envelope's signatures (unverified here: verify the bundle)."""
    origin: str = "signer"
    """`signer` (a validation run on this federation) or `submitted` (`cairn evidence
    submit`, a contributor's own hardware)."""
