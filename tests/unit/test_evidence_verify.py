"""Evidence bundles verified offline: a good bundle passes, every tampering has its reason."""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import SSlibKey

from cairn.errors import InvalidInput
from cairn.evidence import bundle as bundles
from cairn.evidence.bundle import ATTESTATION, MANIFEST, RECIPE, SNAPSHOT, manifest_of
from cairn.evidence.keys import SigningKey
from cairn.evidence.statement import (
    CAIRN_PREDICATE,
    STATEMENT_TYPE,
    TEST_RESULT_PREDICATE,
    recipe_digest,
    sha256_hex,
)
from cairn.evidence.verify import verify_bundle
from tests.fixtures import evidence as ev
from tests.fixtures.evidence import fresh_now  # noqa: F401 - autouse: NOW per test

SITE_KEY = SigningKey.generate()
FED_KEY = SigningKey.generate()
TRUST = ev.trust_of(("site-a", "site", SITE_KEY), ("federation", "first-party", FED_KEY))
NOW = datetime.now(UTC)


def good() -> dict[str, bytes]:
    return ev.bundle("site-a", [SITE_KEY], validated_at=NOW - timedelta(hours=1))


def reasons(files: dict[str, bytes], **kwargs: object) -> dict[str, str]:
    result = verify_bundle(files, kwargs.pop("trust", TRUST), now=NOW,  # type: ignore[arg-type]
                           **kwargs)  # type: ignore[arg-type]
    return {c.name: c.reason for c in result.failed()}


def test_a_good_bundle_is_valid_and_passed() -> None:
    result = verify_bundle(good(), TRUST, now=NOW, max_age=timedelta(days=7))
    assert result.failed() == []
    assert (result.valid, result.passed, result.exit_code) == (True, True, 0)
    assert [s.name for s in result.signers] == ["site-a"]
    names = [c["check"] for c in result.to_dict()["checks"]]
    assert names == ["envelope", "signature", "manifest", "subjects", "snapshot", "recipe",
                     "constraints", "freshness", "result"]


def test_statement_has_the_in_toto_v1_shape() -> None:
    files = good()
    envelope = json.loads(files[ATTESTATION])
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["_type"] == STATEMENT_TYPE
    assert statement["predicateType"] == TEST_RESULT_PREDICATE
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    assert set(subjects) == {SNAPSHOT, RECIPE, "ctrf/readiness.json"}
    assert all(subjects[name] == sha256_hex(files[name]) for name in subjects)
    predicate = statement["predicate"]
    assert predicate["result"] == "PASSED"
    [config] = predicate["configuration"]
    assert config["name"] == ev.CPU_RECIPE
    assert config["digest"]["sha256"] == recipe_digest(__import__("yaml").safe_load(files[RECIPE]))
    assert "readiness/cpu-smoke" in predicate["passedTests"]
    assert "readiness/OS.release.ID" in predicate["passedTests"]
    assert predicate["failedTests"] == [] and predicate["warnedTests"] == []
    cairn = predicate["cairn"]
    assert cairn["type"] == CAIRN_PREDICATE
    assert cairn["ctrf"]["readiness"] == sha256_hex(files["ctrf/readiness.json"])
    assert cairn["snapshot_digest"] == json.loads(files[SNAPSHOT])["digest"]
    assert cairn["site_fingerprint"] and cairn["validator_version"]
    assert cairn["hardware"] == ["1x node: CPU AMD EPYC 9654"]


def test_securesystemslib_verifies_the_bundle_envelope_cosigned() -> None:
    files = bundles.cosign_bundle(good(), FED_KEY)
    envelope = json.loads(files[ATTESTATION])
    keys = [SSlibKey.from_crypto(k.private_key.public_key(), keyid=k.key_id)
            for k in (SITE_KEY, FED_KEY)]
    assert set(SslibEnvelope.from_dict(copy.deepcopy(envelope)).verify(keys, 2)) == {
        SITE_KEY.key_id, FED_KEY.key_id}
    result = verify_bundle(files, TRUST, now=NOW)
    assert {s.name for s in result.signers} == {"site-a", "federation"}
    assert result.exit_code == 0


def _edit_payload(files: dict[str, bytes], change: bytes, to: bytes) -> dict[str, bytes]:
    envelope = json.loads(files[ATTESTATION])
    payload = base64.b64decode(envelope["payload"])
    assert change in payload
    envelope["payload"] = base64.b64encode(payload.replace(change, to, 1)).decode()
    out = {**files, ATTESTATION: json.dumps(envelope).encode()}
    return {**out, MANIFEST: manifest_of(out)}


def test_a_changed_payload_byte_is_a_bad_signature() -> None:
    # A forged verdict that still reads as a statement, and one flipped byte anywhere.
    assert reasons(_edit_payload(good(), b'"site-a"', b'"site-b"')) == {
        "signature": "bad-signature"}
    files = good()
    envelope = json.loads(files[ATTESTATION])
    payload = bytearray(base64.b64decode(envelope["payload"]))
    for offset in (0, len(payload) // 2, len(payload) - 1):
        flipped = bytearray(payload)
        flipped[offset] ^= 0x20
        envelope["payload"] = base64.b64encode(bytes(flipped)).decode()
        tampered = {**files, ATTESTATION: json.dumps(envelope).encode()}
        assert reasons(tampered)["signature"] == "bad-signature"


def test_a_changed_signature_byte_is_a_bad_signature() -> None:
    files = good()
    envelope = json.loads(files[ATTESTATION])
    raw = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    raw[10] ^= 0x01
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()
    tampered = {**files, ATTESTATION: json.dumps(envelope).encode()}
    tampered[MANIFEST] = manifest_of(tampered)
    assert reasons(tampered) == {"signature": "bad-signature"}


def test_a_swapped_snapshot_is_caught_even_with_a_rewritten_manifest() -> None:
    files = good()
    other = ev.snapshot("site-a", cores=2)
    swapped = {**files, SNAPSHOT: bundles.encode_snapshot(other)}
    assert reasons(swapped)["manifest"] == "digest-mismatch"
    swapped[MANIFEST] = manifest_of(swapped)
    found = reasons(swapped)
    assert found["snapshot"] == "snapshot-mismatch"
    assert found["subjects"] == "subject-mismatch"
    assert "manifest" not in found


def test_a_recipe_edited_after_signing_fails_its_digest() -> None:
    files = good()
    text = files[RECIPE].replace(b">= 5.10", b">= 4.0")
    assert text != files[RECIPE]
    edited = {**files, RECIPE: text}
    edited[MANIFEST] = manifest_of(edited)
    found = reasons(edited)
    assert found["recipe"] == "recipe-digest-mismatch"
    assert found["subjects"] == "subject-mismatch"


def test_a_file_added_or_removed_is_caught() -> None:
    files = good()
    assert reasons({**files, "notes.txt": b"trust me"})["manifest"] == "unlisted-file"
    removed = {k: v for k, v in files.items() if k != "ctrf/readiness.json"}
    assert reasons(removed)["manifest"] == "missing-file"
    assert reasons({k: v for k, v in files.items() if k != MANIFEST})["manifest"] == (
        "missing-manifest")


def test_too_old_evidence_is_invalid() -> None:
    files = ev.bundle("site-a", [SITE_KEY], validated_at=NOW - timedelta(days=8))
    assert reasons(files, max_age=timedelta(days=7)) == {"freshness": "too-old"}
    assert reasons(files, max_age=timedelta(days=9)) == {}


def test_an_untrusted_key_or_a_revoked_key_is_refused() -> None:
    stranger = SigningKey.generate()
    assert reasons(ev.bundle("site-a", [stranger])) == {"signature": "untrusted-key"}
    revoked = TRUST.with_revocations([(SITE_KEY.key_id, "laptop lost")])
    result = verify_bundle(good(), revoked, now=NOW)
    assert {c.name: c.reason for c in result.failed()} == {"signature": "revoked-key"}
    assert "laptop lost" in result.check("signature").message
    # A co-signature by a trusted key still carries it.
    cosigned = bundles.cosign_bundle(good(), FED_KEY)
    assert reasons(cosigned, trust=revoked) == {}


def test_accepted_signers_by_name_or_role() -> None:
    assert reasons(good(), accepted_signers=["first-party"]) == {
        "signature": "signer-not-accepted"}
    assert reasons(good(), accepted_signers=["site"]) == {}
    assert reasons(good(), accepted_signers=["site-a"]) == {}


def test_a_claimed_pass_that_the_snapshot_contradicts_is_caught() -> None:
    # A dishonest signer claims a pass for a snapshot whose kernel breaks the recipe: every
    # digest is right (it signed them), but re-running the constraints disagrees.
    old_kernel = ev.snapshot("site-a", kernel="4.19.0")
    honest = ev.judge("site-a", old_kernel)
    assert not honest.passed
    lying = ev.judge("site-a", ev.snapshot("site-a"))
    forged = bundles.ValidationOutcome(**{**lying.__dict__, "snapshot": old_kernel})
    found = reasons(bundles.build_bundle(forged, [SITE_KEY]))
    assert found == {"constraints": "constraint-mismatch"}


def test_a_failed_validation_is_valid_evidence_of_failure() -> None:
    files = ev.bundle("site-a", [SITE_KEY], snap=ev.snapshot("site-a", kernel="4.19.0"))
    result = verify_bundle(files, TRUST, now=NOW)
    assert (result.valid, result.passed, result.exit_code) == (True, False, 1)
    assert "OS.sysctl./proc/sys/kernel/osrelease" in result.check("result").message


def test_directory_and_tarball_roundtrip(tmp_path: Path) -> None:
    files = good()
    bundles.write_dir(files, tmp_path / "b")
    assert bundles.read_bundle(tmp_path / "b") == files
    (tmp_path / "b.tgz").write_bytes(bundles.pack(files))
    assert bundles.read_bundle(tmp_path / "b.tgz") == files
    assert bundles.pack(files) == bundles.pack(dict(reversed(list(files.items()))))
    assert bundles.bundle_digest(files) == sha256_hex(bundles.pack(files))


def test_hostile_tarballs_are_refused(tmp_path: Path) -> None:
    import io
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(InvalidInput, match="outside the bundle"):
        bundles.unpack(raw.getvalue())
    with pytest.raises(InvalidInput, match="not a bundle tarball"):
        bundles.unpack(b"garbage")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "link").symlink_to("/etc/passwd")
    with pytest.raises(InvalidInput, match="symbolic link"):
        bundles.read_bundle(tmp_path / "d")


def test_garbage_attestation_is_an_envelope_failure() -> None:
    files = {**good(), ATTESTATION: b"not json"}
    files[MANIFEST] = manifest_of(files)
    result = verify_bundle(files, TRUST, now=NOW)
    assert result.check("envelope").reason == "not-an-envelope"
    assert result.exit_code == 9


GARBAGE = (b"", b"null", b"[]", b"{}", b"[1, 2]", b"\xff\xfe", b'"text"',
           b'{"results": []}', b'{"results": {"tests": [1, "x", null, {"type": "check"}]}}',
           b'{"files": []}', b'{"payload": 1, "payloadType": [], "signatures": {}}')


@pytest.mark.parametrize("garbage", GARBAGE)
def test_any_file_replaced_by_garbage_is_a_verdict_never_a_crash(garbage: bytes) -> None:
    files = good()
    for path in files:
        tampered = {**files, path: garbage}
        rewritten = [] if path == MANIFEST else [{**tampered, MANIFEST: manifest_of(tampered)}]
        for with_manifest in (tampered, *rewritten):
            result = verify_bundle(with_manifest, TRUST, now=NOW)
            assert result.exit_code == 9, (path, garbage)


# Ten levels of nine aliases: 9**10 (3.5 billion) strings once expanded, in 700 bytes. Added
# to a real resolved recipe (unknown keys are ignored by the Recipe type, but hashed into its
# digest), a plain YAML load and digest would run for hours.
BOMB_ANCHORS = ("a: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
    f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    for prev, cur in zip("abcdefghi", "bcdefghij", strict=True))).encode()


@pytest.mark.parametrize("signed_by", ["a trusted key", "an untrusted key", "nobody"])
def test_an_alias_bomb_recipe_is_refused_by_the_bounded_loader(signed_by: str) -> None:
    """Whoever signed the bundle (anyone may submit one), its recipe is read with the YAML
    loader's limits: refused after a few hundred parser events, never expanded."""
    key = {"a trusted key": [SITE_KEY], "an untrusted key": [SigningKey.generate()],
           "nobody": []}[signed_by]
    files = ev.bundle("site-a", key, validated_at=NOW - timedelta(hours=1))
    files[RECIPE] += BOMB_ANCHORS
    files[MANIFEST] = manifest_of(files)
    result = verify_bundle(files, TRUST, now=NOW)
    recipe = result.check("recipe")
    assert recipe.reason == "recipe-digest-mismatch"
    assert "CAIRN_YAML_MAX_NODES" in recipe.message
    assert result.exit_code == 9


def test_a_tarball_of_endless_folders_is_refused(tmp_path: Path) -> None:
    import io
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for n in range(bundles.MAX_ENTRIES + 1):
            info = tarfile.TarInfo(f"d{n}")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    with pytest.raises(InvalidInput, match="more than 1024 entries"):
        bundles.unpack(raw.getvalue())
