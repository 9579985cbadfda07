"""Dispatch receipts: a signed Verification Summary Attestation (SLSA VSA v1 shape) saying
which evidence the coordinator checked before trusting a site with a job.

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "evidence/<bundle sha256>", "digest": {"sha256": "<bundle sha256>"}}],
     "predicateType": "https://slsa.dev/verification_summary/v1",
     "predicate": {"verifier": {"id": "cairn-coordinator@hub"},
                   "timeVerified": "...", "resourceUri": "cairn:site/<site>",
                   "policy": {"uri": "cairn:job/<study>/<job>/requires",
                              "digest": {"sha256": "<requirement digest>"}},
                   "inputAttestations": [{"uri": "cairn:evidence/<bundle>",
                                          "digest": {"sha256": "<attestation.dsse.json>"}}],
                   "verificationResult": "PASSED", "verifiedLevels": ["CAIRN_RECIPE_<recipe>"],
                   "slsaVersion": "1.0"}}

It travels as a DSSE envelope (JSON object) on the job's deploy command, so it is stored with
the launch in the study's stream for as long as the job's history is.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import msgspec

from cairn.errors import InvalidInput
from cairn.evidence import dsse
from cairn.evidence.keys import SigningKey, VerifyingKey
from cairn.evidence.statement import STATEMENT_TYPE, ResourceDescriptor, sha256_hex

VSA_PREDICATE = "https://slsa.dev/verification_summary/v1"


class Verifier(msgspec.Struct, frozen=True, kw_only=True):
    id: str


class Policy(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    uri: str
    digest: dict[str, str] = {}


class VsaPredicate(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    verifier: Verifier
    time_verified: datetime
    resource_uri: str
    policy: Policy
    input_attestations: list[ResourceDescriptor] = []
    verification_result: Literal["PASSED", "FAILED"]
    verified_levels: list[str] = []
    slsa_version: str = "1.0"


class VsaStatement(msgspec.Struct, frozen=True, kw_only=True,
                   rename={"type_": "_type", "predicate_type": "predicateType"}):
    type_: str = STATEMENT_TYPE
    subject: list[ResourceDescriptor]
    predicate_type: str = VSA_PREDICATE
    predicate: VsaPredicate


def requirement_digest(requirement: Mapping[str, Any]) -> str:
    return sha256_hex(msgspec.json.encode(dict(requirement), order="sorted"))


def build_receipt(*, key: SigningKey, verifier: str, site: str, study: str, job: str,
                  recipe: str, bundle: str, attestation: str, requirement: Mapping[str, Any],
                  verified_at: datetime) -> dict[str, Any]:
    """The signed receipt (a DSSE envelope as a JSON object) of one gated dispatch."""
    statement = VsaStatement(
        subject=[ResourceDescriptor(name=f"evidence/{bundle}", digest={"sha256": bundle})],
        predicate=VsaPredicate(
            verifier=Verifier(id=verifier), time_verified=verified_at,
            resource_uri=f"cairn:site/{site}",
            policy=Policy(uri=f"cairn:job/{study}/{job}/requires",
                          digest={"sha256": requirement_digest(requirement)}),
            input_attestations=[ResourceDescriptor(uri=f"cairn:evidence/{bundle}",
                                                   digest={"sha256": attestation})],
            verification_result="PASSED", verified_levels=[f"CAIRN_RECIPE_{recipe}"]))
    envelope = dsse.sign(msgspec.json.encode(statement), dsse.IN_TOTO_PAYLOAD_TYPE, [key])
    result: dict[str, Any] = msgspec.to_builtins(envelope)
    return result


def verify_receipt(receipt: Mapping[str, Any], keys: Mapping[str, VerifyingKey]) -> VsaStatement:
    """The receipt's statement, when a key in `keys` signed it.

    Raises:
        InvalidInput: not an envelope, not a VSA, or no offered key's signature verifies.
    """
    envelope = dsse.decode_envelope(msgspec.json.encode(dict(receipt)), source="receipt")
    if not dsse.verified_key_ids(envelope, keys):
        raise InvalidInput("the receipt's signature does not verify with any trusted key",
                           field="receipt")
    try:
        statement = msgspec.json.decode(envelope.payload_bytes(), type=VsaStatement)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidInput(f"not a verification summary: {exc}", field="receipt") from None
    if statement.predicate_type != VSA_PREDICATE:
        raise InvalidInput(f"predicate type {statement.predicate_type!r} is not a VSA",
                           field="receipt")
    return statement
