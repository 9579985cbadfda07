"""Offline verification of an evidence bundle: no network, only the bundle and a trust list.

Every check runs and reports, each failure with its own reason code:

    envelope     not-an-envelope, not-a-statement: attestation.dsse.json missing or malformed
    signature    bad-signature, untrusted-key, revoked-key, signer-not-accepted: no trusted,
                 unrevoked (and accepted) signature verifies
    manifest     missing-manifest, missing-file, unlisted-file, digest-mismatch
    subjects     subject-mismatch: a file the statement signs differs from the bundled one
    snapshot     missing-snapshot, snapshot-mismatch: absent, altered, or not the one signed
    recipe       recipe-digest-mismatch: the bundled recipe does not hash to the signed digest
    constraints  constraint-mismatch: re-run on the bundled snapshot, a constraint disagrees
    freshness    too-old, from-the-future
    result       failed: the validation itself did not pass (the evidence is still valid)

Exit codes: 0 valid and passed, 1 valid but the validation failed, 2 invalid.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec

from cairn import yamlfile
from cairn.errors import InvalidInput, Unverified
from cairn.evidence import dsse
from cairn.evidence.bundle import ATTESTATION, CTRF_DIR, MANIFEST, RECIPE, SNAPSHOT
from cairn.evidence.rerun import compare_with_report
from cairn.evidence.statement import Statement, decode_statement, recipe_digest, sha256_hex
from cairn.evidence.trust import TrustedSigner, TrustList
from cairn.files import decode_utf8
from cairn.recipes import Recipe
from cairn.snapshot import Snapshot, decode

FUTURE_SKEW = timedelta(minutes=5)
VALIDITY_CHECKS = ("envelope", "signature", "manifest", "subjects", "snapshot", "recipe",
                   "constraints", "freshness")


@dataclass(frozen=True)
class CheckOutcome:
    """One check: passed or not, a reason code when not, and a line for people."""

    name: str
    passed: bool
    reason: str = ""
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.name, "passed": self.passed, "reason": self.reason,
                "message": self.message}


@dataclass(frozen=True)
class Verification:
    """Everything verification found about one bundle."""

    checks: list[CheckOutcome]
    statement: Statement | None = None
    signers: list[TrustedSigner] = field(default_factory=list)
    """The trusted, unrevoked (and accepted) signers whose signature verifies."""
    recipe: Recipe | None = None
    """The bundled recipe, when its digest is the signed one."""
    snapshot: Snapshot | None = None
    """The bundled snapshot, when it is the signed one."""

    @property
    def valid(self) -> bool:
        return all(c.passed for c in self.checks if c.name in VALIDITY_CHECKS)

    @property
    def passed(self) -> bool:
        return self.valid and all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 valid and passed; 1 valid, recording a failed validation; 9 (`Unverified`)
        invalid: a check failed, so nothing it says can be trusted."""
        return 0 if self.passed else (1 if self.valid else Unverified.exit_code)

    def failed(self) -> list[CheckOutcome]:
        return [c for c in self.checks if not c.passed]

    def check(self, name: str) -> CheckOutcome:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        predicate = self.statement.predicate if self.statement else None
        return {
            "valid": self.valid, "passed": self.passed, "exit_code": self.exit_code,
            "site": predicate.cairn.site if predicate else None,
            "recipe": predicate.cairn.recipe if predicate else None,
            "result": predicate.result if predicate else None,
            "validated_at": predicate.cairn.validated_at.isoformat() if predicate else None,
            "signers": [{"name": s.name, "role": s.role, "key_id": s.key_id}
                        for s in self.signers],
            "checks": [c.to_dict() for c in self.checks],
        }


def verify_bundle(files: Mapping[str, bytes], trust: TrustList, *, now: datetime,
                  max_age: timedelta | None = None,
                  accepted_signers: Sequence[str] = ()) -> Verification:
    """Verify a bundle offline.

    Args:
        files: the bundle (see `cairn.evidence.bundle.read_bundle`).
        trust: whose signatures count and which keys are revoked.
        now: the time freshness is judged at (passed in: verification keeps no clock).
        max_age: how old the validation may be; None accepts any age.
        accepted_signers: names or roles of which one signer must be (empty: any trusted).
    """
    # The recipe is parsed first, bounded, whoever signed (or did not sign) the bundle: a
    # bundle anyone may submit must not cost more to read than its size allows.
    parsed_recipe = _parse_recipe(files)
    envelope, statement, envelope_check = _open(files)
    if envelope is None:
        return Verification(checks=[envelope_check, _manifest(files)])
    signature_check, signers = _signature(envelope, trust, accepted_signers)
    if statement is None:
        return Verification(checks=[envelope_check, signature_check, _manifest(files)])
    snapshot_check, snapshot = _snapshot(files, statement)
    recipe_check, recipe = _recipe(parsed_recipe, statement)
    checks = [envelope_check, signature_check, _manifest(files), _subjects(files, statement),
              snapshot_check, recipe_check, _constraints(files, recipe, snapshot),
              _freshness(statement, now, max_age), _result(statement)]
    return Verification(checks=checks, statement=statement, signers=signers, recipe=recipe,
                        snapshot=snapshot)


def _open(files: Mapping[str, bytes]) -> tuple[dsse.Envelope | None, Statement | None,
                                               CheckOutcome]:
    if ATTESTATION not in files:
        return None, None, CheckOutcome("envelope", False, "not-an-envelope",
                                        f"the bundle has no {ATTESTATION}")
    try:
        envelope = dsse.decode_envelope(files[ATTESTATION], source=ATTESTATION)
    except InvalidInput as exc:
        return None, None, CheckOutcome("envelope", False, "not-an-envelope", str(exc))
    if envelope.payload_type != dsse.IN_TOTO_PAYLOAD_TYPE:
        return envelope, None, CheckOutcome(
            "envelope", False, "not-a-statement",
            f"payload type is {envelope.payload_type!r}, not {dsse.IN_TOTO_PAYLOAD_TYPE}")
    try:
        statement = decode_statement(envelope.payload_bytes(), source=ATTESTATION)
    except InvalidInput as exc:
        return envelope, None, CheckOutcome("envelope", False, "not-a-statement", str(exc))
    return envelope, statement, CheckOutcome("envelope", True,
                                             message="an in-toto Statement v1 in DSSE")


def _signature(envelope: dsse.Envelope, trust: TrustList,
               accepted: Sequence[str]) -> tuple[CheckOutcome, list[TrustedSigner]]:
    outcomes = dsse.check_signatures(envelope, trust.keys())
    good: list[TrustedSigner] = []
    problems: dict[str, list[str]] = {}
    for outcome in outcomes:
        short = outcome.keyid[:12] or "(no key id)"
        if outcome.outcome is dsse.SignatureOutcome.UNKNOWN_KEY:
            reason = "revoked-key" if outcome.keyid in trust.revoked else "untrusted-key"
            problems.setdefault(reason, []).append(short)
        elif outcome.outcome is dsse.SignatureOutcome.BAD_SIGNATURE:
            problems.setdefault("bad-signature", []).append(short)
        elif outcome.keyid in trust.revoked:
            why = trust.revoked[outcome.keyid]
            problems.setdefault("revoked-key", []).append(short + (f" ({why})" if why else ""))
        elif not trust.signers[outcome.keyid].matches(accepted):
            problems.setdefault("signer-not-accepted", []).append(
                trust.signers[outcome.keyid].name)
        else:
            good.append(trust.signers[outcome.keyid])
    if good:
        names = ", ".join(f"{s.name} ({s.role})" for s in good)
        return CheckOutcome("signature", True, message=f"signed by {names}"), good
    if not outcomes:
        return CheckOutcome("signature", False, "untrusted-key", "the envelope is unsigned"), []
    words = {"bad-signature": "does not verify (payload or signature altered)",
             "revoked-key": "is by a revoked key", "untrusted-key": "is by a key not trusted",
             "signer-not-accepted": f"is by a signer not among {list(accepted)}"}
    for reason in ("bad-signature", "revoked-key", "signer-not-accepted", "untrusted-key"):
        if reason in problems:
            return CheckOutcome("signature", False, reason,
                                f"signature {words[reason]}: {', '.join(problems[reason])}"), []
    raise AssertionError("every signature has an outcome")


def _manifest(files: Mapping[str, bytes]) -> CheckOutcome:
    if MANIFEST not in files:
        return CheckOutcome("manifest", False, "missing-manifest", f"no {MANIFEST}")
    try:
        listed = json.loads(files[MANIFEST])["files"]
        if not isinstance(listed, dict):
            raise TypeError("files is not a mapping")
    except (ValueError, KeyError, TypeError) as exc:
        return CheckOutcome("manifest", False, "missing-manifest", f"{MANIFEST} unreadable: {exc}")
    present = set(files) - {MANIFEST}
    missing = sorted(set(listed) - present)
    if missing:
        return CheckOutcome("manifest", False, "missing-file",
                            f"listed but not in the bundle: {', '.join(missing)}")
    unlisted = sorted(present - set(listed))
    if unlisted:
        return CheckOutcome("manifest", False, "unlisted-file",
                            f"in the bundle but not in the manifest: {', '.join(unlisted)}")
    wrong = sorted(p for p in present if sha256_hex(files[p]) != listed[p])
    if wrong:
        return CheckOutcome("manifest", False, "digest-mismatch",
                            f"content differs from the manifest: {', '.join(wrong)}")
    return CheckOutcome("manifest", True, message=f"{len(present)} files, every digest matches")


def _subjects(files: Mapping[str, bytes], statement: Statement) -> CheckOutcome:
    signed = {s.name: s.digest.get("sha256", "") for s in statement.subject}
    content = {p for p in files if p in (SNAPSHOT, RECIPE) or p.startswith(f"{CTRF_DIR}/")}
    wrong = sorted(p for p in signed if p not in files or sha256_hex(files[p]) != signed[p])
    wrong += sorted(content - set(signed))
    if wrong:
        return CheckOutcome("subjects", False, "subject-mismatch",
                            f"not what was signed: {', '.join(wrong)}")
    return CheckOutcome("subjects", True, message=f"{len(signed)} signed files match")


def _snapshot(files: Mapping[str, bytes],
              statement: Statement) -> tuple[CheckOutcome, Snapshot | None]:
    if SNAPSHOT not in files:
        return CheckOutcome("snapshot", False, "missing-snapshot", f"no {SNAPSHOT}"), None
    try:
        snapshot = decode(files[SNAPSHOT], source=SNAPSHOT)
    except InvalidInput as exc:
        return CheckOutcome("snapshot", False, "snapshot-mismatch", str(exc)), None
    signed = statement.predicate.cairn.snapshot_digest
    if snapshot.digest != signed:
        return CheckOutcome("snapshot", False, "snapshot-mismatch",
                            f"bundled snapshot is {snapshot.digest[:12]}, the statement signs "
                            f"{signed[:12]} (snapshot swapped)"), None
    return CheckOutcome("snapshot", True, message=f"snapshot {signed[:12]} as signed"), snapshot


def _parse_recipe(files: Mapping[str, bytes]) -> Any:
    """The bundled recipe's data (the YAML loader's limits: `cairn.yamlfile`), or the
    `InvalidInput` saying why it cannot be read."""
    if RECIPE not in files:
        return InvalidInput("missing", file=RECIPE)
    try:
        return yamlfile.parse(decode_utf8(files[RECIPE], RECIPE), RECIPE).data
    except InvalidInput as exc:
        return exc


def _recipe(data: Any, statement: Statement) -> tuple[CheckOutcome, Recipe | None]:
    signed = statement.predicate.cairn.recipe_digest
    configured = [c.digest.get("sha256") for c in statement.predicate.configuration]
    try:
        if isinstance(data, InvalidInput):
            raise data
        recipe = msgspec.convert(data, Recipe)
    except (InvalidInput, msgspec.ValidationError, TypeError) as exc:
        return CheckOutcome("recipe", False, "recipe-digest-mismatch",
                            f"{RECIPE} is missing or not a resolved recipe: {exc}"), None
    actual = recipe_digest(data)
    if actual != signed or signed not in configured:
        return CheckOutcome("recipe", False, "recipe-digest-mismatch",
                            f"bundled recipe hashes to {actual[:12]}, the statement signs "
                            f"{signed[:12]} (recipe edited after signing)"), None
    return CheckOutcome("recipe", True, message=f"recipe {recipe.name} {actual[:12]}"), recipe


def _constraints(files: Mapping[str, bytes], recipe: Recipe | None,
                 snapshot: Snapshot | None) -> CheckOutcome:
    if recipe is None or snapshot is None:
        return CheckOutcome("constraints", False, "constraint-mismatch",
                            "cannot re-run: no trustworthy recipe or snapshot in the bundle")
    reports: dict[str, Any] = {}
    for path, data in files.items():
        if path.startswith(f"{CTRF_DIR}/") and path.endswith(".json"):
            try:
                report = json.loads(data)
            except ValueError:
                report = None
            if not _is_ctrf(report):
                return CheckOutcome("constraints", False, "constraint-mismatch",
                                    f"{path} is not a CTRF report")
            reports[path[len(CTRF_DIR) + 1:-len(".json")]] = report
    mismatches = compare_with_report(recipe, snapshot, reports)
    if mismatches:
        first = "; ".join(f"{m.phase}/{m.name}: report says {m.claimed}, re-run gives "
                          f"{m.rerun}" for m in mismatches[:3])
        return CheckOutcome("constraints", False, "constraint-mismatch", first)
    return CheckOutcome("constraints", True,
                        message="every constraint re-run on the bundled snapshot agrees")


def _is_ctrf(report: object) -> bool:
    """A CTRF document as far as re-running needs: results.tests, a list of objects whose
    readings (for checks) are an object."""
    if not isinstance(report, dict) or not isinstance(report.get("results"), dict):
        return False
    tests = report["results"].get("tests")
    return isinstance(tests, list) and all(
        isinstance(t, dict) and isinstance(t.get("extra", {}), dict)
        and isinstance(t.get("extra", {}).get("readings", {}), dict) for t in tests)


def _freshness(statement: Statement, now: datetime, max_age: timedelta | None) -> CheckOutcome:
    at = statement.predicate.cairn.validated_at
    age = now - at
    if age < -FUTURE_SKEW:
        return CheckOutcome("freshness", False, "from-the-future",
                            f"validated at {at.isoformat()}, after now")
    if max_age is not None and age > max_age:
        return CheckOutcome("freshness", False, "too-old",
                            f"validated {_days(age)} ago, more than the max age {_days(max_age)}")
    return CheckOutcome("freshness", True, message=f"validated {_days(age)} ago")


def _result(statement: Statement) -> CheckOutcome:
    predicate = statement.predicate
    if predicate.result == "FAILED":
        failed = ", ".join(predicate.failed_tests[:5]) or "(no test ids)"
        return CheckOutcome("result", False, "failed", f"the validation failed: {failed}")
    return CheckOutcome("result", True, message=f"the validation {predicate.result.lower()}")


def _days(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds >= 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds}s"
