"""Signed attestation of a bundle: a DSSE envelope around an in-toto Statement.

The statement's subjects are every file of the bundle by sha256 (checksums.txt included), so
one signature covers the whole inventory; the predicate says what the bundle deploys. Nothing
in it depends on the clock and Ed25519 signatures are deterministic, so a signed bundle is as
reproducible as an unsigned one. Keys and envelopes are `cairn.evidence`'s (the same key files
as `cairn keys create` writes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from cairn.bundles.checksums import ATTESTATION_FILE, LIST_FILE_BYTES, digest
from cairn.bundles.model import BundleManifest
from cairn.errors import InvalidInput
from cairn.evidence.dsse import (
    IN_TOTO_PAYLOAD_TYPE,
    SignatureOutcome,
    check_signatures,
    decode_envelope,
    encode_envelope,
    sign,
)
from cairn.evidence.keys import SigningKey, VerifyingKey
from cairn.files import read_bytes

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "cairn.bundle/v1"


class Subject(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    digest: dict[str, str]


class ComponentPin(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    chart: str
    repository: str
    version: str


class BundlePredicate(msgspec.Struct, frozen=True, kw_only=True):
    recipe: str
    deployer: str
    applied: list[str]
    components: list[ComponentPin]


class Statement(msgspec.Struct, frozen=True, kw_only=True, rename={
        "type_": "_type", "predicate_type": "predicateType"}):
    type_: str = STATEMENT_TYPE
    subject: list[Subject]
    predicate_type: str = PREDICATE_TYPE
    predicate: BundlePredicate


def statement(files: Mapping[str, bytes], manifest: BundleManifest) -> Statement:
    return Statement(
        subject=[Subject(name=p, digest={"sha256": digest(files[p])}) for p in sorted(files)],
        predicate=BundlePredicate(
            recipe=manifest.recipe, deployer=manifest.deployer, applied=manifest.applied,
            components=[ComponentPin(name=c.name, chart=c.chart, repository=c.repository,
                                     version=c.version) for c in manifest.components]))


def attest(files: dict[str, bytes], manifest: BundleManifest, key: SigningKey) -> None:
    """Add `attestation.dsse.json`, signed by `key`, to a rendered bundle's `files`."""
    payload = msgspec.json.encode(statement(files, manifest), order="deterministic")
    envelope = sign(payload, IN_TOTO_PAYLOAD_TYPE, [key])
    files[ATTESTATION_FILE] = encode_envelope(envelope) + b"\n"


@dataclass
class AttestationCheck:
    """What checking a bundle's attestation found."""

    present: bool
    key_ids: list[str] = field(default_factory=list)
    """Key ids of the signatures on it."""
    verified_by: list[str] = field(default_factory=list)
    """Key ids among those offered whose signature verifies."""
    problems: list[str] = field(default_factory=list)


def check_attestation(root: Path, files: Mapping[str, Path],
                      keys: Mapping[str, VerifyingKey]) -> AttestationCheck:
    """Check `root`'s attestation against the bundle's files and, if given, the keys.

    `files` are the bundle's regular files (checksums.txt included). With keys offered, at
    least one of them must have signed; a statement that does not list exactly the files
    present, with their digests, is a problem either way.
    """
    path = root / ATTESTATION_FILE
    if not path.is_file():
        return AttestationCheck(present=False,
                                problems=["the bundle is not signed"] if keys else [])
    try:
        envelope = decode_envelope(read_bytes(path, limit=LIST_FILE_BYTES), source=str(path))
    except InvalidInput as exc:
        return AttestationCheck(present=True, problems=[f"{ATTESTATION_FILE}: {exc.message}"])
    result = AttestationCheck(present=True, key_ids=[s.keyid for s in envelope.signatures])
    if envelope.payload_type != IN_TOTO_PAYLOAD_TYPE:
        result.problems.append(f"payload type is {envelope.payload_type!r}")
        return result
    try:
        signed = msgspec.json.decode(envelope.payload_bytes(), type=Statement)
    except (msgspec.DecodeError, InvalidInput) as exc:
        result.problems.append(f"the statement cannot be read: {exc}")
        return result
    listed = {s.name: s.digest.get("sha256", "") for s in signed.subject}
    actual = {rel: digest(p.read_bytes()) for rel, p in files.items()}
    for rel in sorted(set(listed) | set(actual)):
        if listed.get(rel) != actual.get(rel):
            state = ("not in the statement" if rel not in listed else
                     "missing" if rel not in actual else "differs from the statement")
            result.problems.append(f"{rel}: {state}")
    if keys:
        checks = check_signatures(envelope, keys)
        result.verified_by = [c.keyid for c in checks if c.outcome is SignatureOutcome.VALID]
        if not result.verified_by:
            result.problems.append("no signature verifies with the key(s) given")
    return result
