"""`cairn bundle verify`: checksums.txt is the complete inventory of a bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.bundles_support import TRAINING, cairn, render


def verify(capsys: pytest.CaptureFixture[str], root: Path) -> tuple[int, dict[str, object]]:
    code, out, _ = cairn(capsys, "bundle", "verify", str(root), "-o", "json")
    return code, json.loads(out) if out else {}


@pytest.fixture
def bundle(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Path:
    return render(capsys, tmp_path / "b", TRAINING, "flux")


def test_a_fresh_bundle_verifies(capsys: pytest.CaptureFixture[str], bundle: Path) -> None:
    code, report = verify(capsys, bundle)
    listed = (bundle / "checksums.txt").read_text().splitlines()
    on_disk = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    assert (code, report["ok"]) == (0, True)
    assert {line.split("  ", 1)[1] for line in listed} == on_disk - {"checksums.txt"}
    assert report["checked"] == len(listed)


def test_an_added_file_is_named(capsys: pytest.CaptureFixture[str], bundle: Path) -> None:
    (bundle / "releases" / "extra.yaml").write_text("kind: ConfigMap\n")
    code, report = verify(capsys, bundle)
    assert code == 9
    assert (report["added"], report["removed"], report["changed"]) == (
        ["releases/extra.yaml"], [], [])


def test_a_removed_file_is_named(capsys: pytest.CaptureFixture[str], bundle: Path) -> None:
    (bundle / "releases" / "gpu-operator.yaml").unlink()
    code, report = verify(capsys, bundle)
    assert code == 9 and report["removed"] == ["releases/gpu-operator.yaml"]


def test_a_changed_file_is_named_in_the_text_output(capsys: pytest.CaptureFixture[str],
                                                    bundle: Path) -> None:
    target = bundle / "releases" / "gpu-operator.yaml"
    target.write_text(target.read_text().replace("v26.7.0", "v26.7.1"))
    code, out, _ = cairn(capsys, "bundle", "verify", str(bundle))
    assert code == 9
    assert "changed: releases/gpu-operator.yaml" in out and "FAILED" in out


def test_a_link_in_place_of_a_file_is_a_change(capsys: pytest.CaptureFixture[str],
                                               bundle: Path, tmp_path: Path) -> None:
    target = bundle / "README.md"
    copy = tmp_path / "readme-copy"
    copy.write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(copy)
    code, report = verify(capsys, bundle)
    assert code == 9 and report["changed"] == ["README.md"]


def test_editing_checksums_txt_to_hide_a_change_still_fails(
        capsys: pytest.CaptureFixture[str], bundle: Path) -> None:
    sums = bundle / "checksums.txt"
    lines = [line for line in sums.read_text().splitlines()
             if not line.endswith("  README.md")]
    sums.write_text("\n".join(lines) + "\n")
    code, report = verify(capsys, bundle)
    assert code == 9 and report["added"] == ["README.md"]


def test_not_a_bundle_and_a_malformed_inventory(capsys: pytest.CaptureFixture[str],
                                                bundle: Path, tmp_path: Path) -> None:
    code, _, err = cairn(capsys, "bundle", "verify", str(tmp_path / "nothing"))
    assert code == 4 and "no such bundle directory" in err
    (bundle / "checksums.txt").write_text("abc  ../etc/passwd\n")
    code, _, err = cairn(capsys, "bundle", "verify", str(bundle))
    assert code == 3 and "checksums.txt:1:" in err and "Traceback" not in err
