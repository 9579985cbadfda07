"""The in-toto Statement v1 that evidence signs: a test-result predicate plus Cairn's own.

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "snapshot.json", "digest": {"sha256": "..."}}, ...],
     "predicateType": "https://in-toto.io/attestation/test-result/v0.1",
     "predicate": {"result": "PASSED", "configuration": [recipe descriptor],
                   "passedTests": [...], "warnedTests": [...], "failedTests": [...],
                   "cairn": {Cairn predicate}}}

The subjects are the bundle's content files by sha256, so the signature covers them. The
Cairn predicate rides in the test-result predicate under `cairn` (in-toto consumers ignore
fields they do not know) and carries what the test-result type has no field for: CTRF
digests, the snapshot's own digest, the validator's version, the site's fingerprint.

A test id is `<phase>/<test name>` as the phase's CTRF document names it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import msgspec

from cairn.errors import InvalidInput
from cairn.snapshot import Snapshot

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT_PREDICATE = "https://in-toto.io/attestation/test-result/v0.1"
CAIRN_PREDICATE = "cairn.validation/v1"

Result = Literal["PASSED", "WARNED", "FAILED"]


class ResourceDescriptor(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """in-toto ResourceDescriptor (the fields Cairn uses)."""

    name: str = ""
    uri: str = ""
    digest: dict[str, str] = {}
    annotations: dict[str, Any] = {}


class CairnPredicate(msgspec.Struct, frozen=True, kw_only=True):
    """What a verifier needs beyond the test result."""

    type: str = CAIRN_PREDICATE
    site: str
    recipe: str
    run: str = ""
    recipe_digest: str
    """sha256 of the resolved recipe's canonical JSON (see `recipe_digest`)."""
    validated_at: datetime
    """When the validation completed: freshness is measured from here."""
    snapshot_digest: str
    """The snapshot's own content digest (`Snapshot.digest`)."""
    snapshot_taken_at: datetime | None = None
    ctrf: dict[str, str] = {}
    """Phase -> sha256 of its `ctrf/<phase>.json`."""
    phases: dict[str, str] = {}
    """Phase -> status (passed, failed, skipped)."""
    validator_version: str = ""
    site_fingerprint: str = ""
    """sha256 over the site's nodes and their hardware (see `site_fingerprint`)."""
    hardware: list[str] = []
    """One line per distinct machine kind, e.g. `2x node: 8x NVIDIA H100 80GB HBM3`."""


class ResultPredicate(msgspec.Struct, frozen=True, kw_only=True,
                          rename={"passed_tests": "passedTests", "warned_tests": "warnedTests",
                                  "failed_tests": "failedTests"}):
    result: Result
    configuration: list[ResourceDescriptor] = []
    url: str = ""
    passed_tests: list[str] = []
    warned_tests: list[str] = []
    failed_tests: list[str] = []
    cairn: CairnPredicate


class Statement(msgspec.Struct, frozen=True, kw_only=True,
                rename={"type_": "_type", "predicate_type": "predicateType"}):
    type_: str = STATEMENT_TYPE
    subject: list[ResourceDescriptor]
    predicate_type: str = TEST_RESULT_PREDICATE
    predicate: ResultPredicate


def recipe_digest(resolved: Mapping[str, Any]) -> str:
    """sha256 hex of a resolved recipe's canonical JSON (sorted keys, no provenance)."""
    body = {k: v for k, v in resolved.items() if k != "provenance"}
    return hashlib.sha256(msgspec.json.encode(body, order="sorted")).hexdigest()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def outcome_ids(
    ctrf_docs: Mapping[str, Mapping[str, Any]],
) -> tuple[list[str], list[str], list[str]]:
    """(passed, warned, failed) test ids from each phase's CTRF document.

    A warning that did not hold (`other`) is warned; a skipped check is failed (a check that
    did not run proves nothing); an optional reading that was absent is in none of them.
    """
    passed: list[str] = []
    warned: list[str] = []
    failed: list[str] = []
    for phase, doc in ctrf_docs.items():
        for test in doc.get("results", {}).get("tests", []):
            test_id = f"{phase}/{test.get('name', '')}"
            status = test.get("status")
            if status == "passed":
                passed.append(test_id)
            elif status == "other":
                warned.append(test_id)
            elif status == "failed" or (status == "skipped" and test.get("type") == "check"):
                failed.append(test_id)
    return passed, warned, failed


def overall_result(passed: bool, warned: list[str]) -> Result:
    if not passed:
        return "FAILED"
    return "WARNED" if warned else "PASSED"


def hardware_lines(snapshot: Snapshot | None) -> list[str]:
    """Distinct machine kinds of a snapshot: CPU model, GPU count and model, per node."""
    if snapshot is None:
        return []
    kinds: dict[str, int] = {}
    for node in snapshot.nodes or []:
        readings = snapshot.readings(node.node)
        gpu_model = readings.get("GPU.hardware.model") or readings.get("GPU.smi.gpu.model")
        gpu_count = readings.get("GPU.hardware.gpu-count", readings.get("GPU.smi.gpu-count", 0))
        cpu = readings.get("CPU.info.model") or readings.get("CPU.info.arch") or "unknown CPU"
        kind = f"{gpu_count}x {gpu_model}" if gpu_model and gpu_count else f"CPU {cpu}"
        kinds[kind] = kinds.get(kind, 0) + 1
    return [f"{count}x node: {kind}" for kind, count in sorted(kinds.items())]


def site_fingerprint(snapshot: Snapshot | None) -> str:
    """sha256 over the site's node names and hardware identity (GPU uuids, CPU model):
    stable across software changes, different for different machines."""
    if snapshot is None:
        return ""
    identity = []
    for node in sorted(snapshot.nodes or [], key=lambda n: n.node):
        readings = snapshot.readings(node.node)
        uuids = sorted(str(v) for k, v in readings.items()
                       if k.startswith("GPU.gpu") and k.endswith(".uuid"))
        identity.append([node.node, str(readings.get("CPU.info.model", "")), uuids])
    return sha256_hex(msgspec.json.encode([snapshot.site, identity]))


_DECODER = msgspec.json.Decoder(Statement)


def encode_statement(statement: Statement) -> bytes:
    return msgspec.json.encode(statement)


def decode_statement(data: bytes, *, source: str = "<statement>") -> Statement:
    """Parse a statement (leniently: unknown fields are ignored, as in-toto requires).

    Raises:
        InvalidInput: not JSON, or missing what Cairn needs (names the field).
    """
    try:
        statement = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidInput(f"not a Cairn evidence statement: {exc}", file=source) from None
    if statement.type_ != STATEMENT_TYPE:
        raise InvalidInput(f"statement type is {statement.type_!r}, not {STATEMENT_TYPE}",
                           file=source, field="_type")
    if statement.predicate_type != TEST_RESULT_PREDICATE:
        raise InvalidInput(f"predicate type is {statement.predicate_type!r}, not "
                           f"{TEST_RESULT_PREDICATE}", file=source, field="predicateType")
    return statement
