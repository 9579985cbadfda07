"""`cairn bundle --sign KEY` and `cairn bundle verify --key PUB`: a signed inventory."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cairn.evidence.keys import create_key_files
from tests.unit.bundles_support import INFERENCE, TRAINING, cairn, render


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    create_key_files(tmp_path / "keys" / "ops")
    create_key_files(tmp_path / "keys" / "stranger")
    return {"key": tmp_path / "keys" / "ops.key", "pub": tmp_path / "keys" / "ops.pub",
            "other": tmp_path / "keys" / "stranger.pub"}


def verify(capsys: pytest.CaptureFixture[str], root: Path, *keys: Path
           ) -> tuple[int, dict[str, object]]:
    args = [a for k in keys for a in ("--key", str(k))]
    code, out, err = cairn(capsys, "bundle", "verify", str(root), *args, "-o", "json")
    assert out, err
    return code, json.loads(out)


def test_a_signed_bundle_verifies_with_its_key_and_is_reproducible(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, keys: dict[str, Path]) -> None:
    one = render(capsys, tmp_path / "one", INFERENCE, "argocd", "--sign", str(keys["key"]))
    two = render(capsys, tmp_path / "two", INFERENCE, "argocd", "--sign", str(keys["key"]))
    assert (one / "attestation.dsse.json").read_bytes() == \
        (two / "attestation.dsse.json").read_bytes()
    code, report = verify(capsys, one, keys["pub"])
    assert code == 0 and report["ok"] is True and report["signed"] is True
    assert report["verified_by"] == report["signed_by"] and len(report["signed_by"]) == 1  # type: ignore[arg-type]
    code, out, _ = cairn(capsys, "bundle", "verify", str(one))
    assert code == 0 and "signature not checked (give --key)" in out


def test_another_key_or_no_signature_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           keys: dict[str, Path]) -> None:
    signed = render(capsys, tmp_path / "s", TRAINING, "helm", "--sign", str(keys["key"]))
    code, report = verify(capsys, signed, keys["other"])
    assert code == 9
    assert report["attestation_problems"] == ["no signature verifies with the key(s) given"]
    unsigned = render(capsys, tmp_path / "u", TRAINING, "helm")
    code, report = verify(capsys, unsigned, keys["pub"])
    assert code == 9 and report["attestation_problems"] == ["the bundle is not signed"]


def test_rewriting_checksums_txt_does_not_hide_a_change_from_the_signature(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, keys: dict[str, Path]) -> None:
    root = render(capsys, tmp_path / "b", TRAINING, "helm", "--sign", str(keys["key"]))
    values = root / "gpu-operator" / "values.yaml"
    values.write_text(values.read_text().replace("kernelModuleType: open",
                                                 "kernelModuleType: proprietary"))
    sums = root / "checksums.txt"
    new_digest = hashlib.sha256(values.read_bytes()).hexdigest()
    sums.write_text("".join(
        f"{new_digest}  gpu-operator/values.yaml\n" if line.endswith("gpu-operator/values.yaml")
        else line + "\n" for line in sums.read_text().splitlines()))
    code, report = verify(capsys, root, keys["pub"])
    assert code == 9 and report["changed"] == []
    assert report["attestation_problems"] == [
        "checksums.txt: differs from the statement",
        "gpu-operator/values.yaml: differs from the statement"]


def test_a_garbage_attestation_fails_verification(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", TRAINING, "helm")
    (root / "attestation.dsse.json").write_text("{}")
    code, report = verify(capsys, root)
    assert code == 9 and report["ok"] is False
    assert str(report["attestation_problems"]).startswith("['attestation.dsse.json: not a DSSE")


def test_a_private_key_others_can_read_is_refused(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path,
                                                  keys: dict[str, Path]) -> None:
    keys["key"].chmod(0o644)
    code, _, err = cairn(capsys, "bundle", "--recipe", TRAINING, "--out", str(tmp_path / "b"),
                         "--sign", str(keys["key"]))
    assert code == 5 and "chmod 600" in err and not (tmp_path / "b").exists()
