"""Evidence on the bus: bundles in the `evidence` object store (named by their sha256),
announced as `evidence.recorded` on `cairn.evidence.<site>.<recipe>` (stream EVIDENCE).

Content addressing means nothing is ever overwritten: a bundle re-published lands on the
same name, and the event's fixed id (derived from the bundle digest) is dropped by
JetStream's duplicate window.
"""

from __future__ import annotations

from collections.abc import Mapping

from cairn import subjects
from cairn.bus import Bus, objects, replay
from cairn.errors import InvalidInput
from cairn.events import EVIDENCE_DECODER, EvidenceRecorded, now
from cairn.evidence import dsse
from cairn.evidence.bundle import ATTESTATION, BundleFiles, pack, unpack
from cairn.evidence.statement import decode_statement, sha256_hex


def describe(files: Mapping[str, bytes], *, source: str, origin: str = "signer",
             actor: str | None = None) -> tuple[bytes, EvidenceRecorded]:
    """(packed bundle, its announcement), read from the bundle's own (unverified) statement.

    Raises:
        InvalidInput: the bundle has no readable statement.
    """
    envelope = dsse.decode_envelope(files.get(ATTESTATION, b""), source=ATTESTATION)
    statement = decode_statement(envelope.payload_bytes(), source=ATTESTATION)
    cairn = statement.predicate.cairn
    packed = pack(files)
    digest = sha256_hex(packed)
    event = EvidenceRecorded(
        id=f"evidence-{digest}", at=now(), source=source, actor=actor, site=cairn.site,
        recipe=cairn.recipe, bundle=digest, attestation_digest=sha256_hex(files[ATTESTATION]),
        run=cairn.run, result=statement.predicate.result, validated_at=cairn.validated_at,
        recipe_digest=cairn.recipe_digest, snapshot_digest=cairn.snapshot_digest,
        site_fingerprint=cairn.site_fingerprint, hardware=list(cairn.hardware),
        signers=[s.keyid for s in envelope.signatures], origin=origin)
    return packed, event


async def publish_bundle(bus: Bus, files: Mapping[str, bytes], *, source: str,
                         origin: str = "signer", actor: str | None = None,
                         headers: dict[str, str] | None = None) -> EvidenceRecorded:
    """Store the bundle and announce it (with `headers`); returns the announcement."""
    packed, event = describe(files, source=source, origin=origin, actor=actor)
    await bus.ensure(subjects.EVIDENCE_STREAM)
    await (await objects(bus, subjects.OBJ_EVIDENCE)).put(packed)
    await bus.publish(event, headers=headers)
    return event


async def fetch_bundle(bus: Bus, digest: str) -> BundleFiles:
    """A bundle from the `evidence` store, checked against its name.

    Raises:
        NotFound: no such bundle.
        InvalidInput: its bytes do not hash to its name, or it is not a bundle.
    """
    data = await (await objects(bus, subjects.OBJ_EVIDENCE)).get(digest)
    if sha256_hex(data) != digest:
        raise InvalidInput(f"evidence object {digest} does not match its name")
    return unpack(data, source=f"evidence/{digest}")


async def recorded(bus: Bus, site: str | None = None,
                   recipe: str | None = None) -> list[EvidenceRecorded]:
    """Every evidence announcement (of one site and/or recipe), oldest first."""
    await bus.ensure(subjects.EVIDENCE_STREAM)
    out: list[EvidenceRecorded] = []
    async for item in replay(bus, subjects.EVIDENCE_STREAM.name, EVIDENCE_DECODER,
                             filters=[subjects.evidence_filter(site, recipe)]):
        if item.event is not None:
            out.append(item.event)
    return out


async def latest(bus: Bus, site: str, recipe: str) -> EvidenceRecorded | None:
    """The newest announcement for a site and recipe (by validation time)."""
    found = await recorded(bus, site, recipe)
    return max(found, key=lambda e: (e.validated_at or e.at, e.at)) if found else None
