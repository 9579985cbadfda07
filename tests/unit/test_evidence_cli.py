"""`cairn keys create` and `cairn evidence verify` offline, as a user meets them."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import yaml

from cairn.evidence import bundle as bundles
from cairn.evidence.bundle import MANIFEST, SNAPSHOT, manifest_of
from cairn.evidence.keys import load_signing_key
from tests.cli_runner import cairn
from tests.fixtures import evidence as ev


def setup_keys(tmp_path: Path) -> tuple[Path, Path]:
    """A key made with `cairn keys create`, and a trust list of its printed entry."""
    code, out, err = cairn("keys", "create", "site-a", "--dir", str(tmp_path / "keys"),
                           "-o", "json")
    assert code == 0, err
    made = json.loads(out)
    assert stat.S_IMODE(Path(made["private"]).stat().st_mode) == 0o600
    trust = tmp_path / "trust.yaml"
    trust.write_text(yaml.safe_dump({"signers": [made["trust_entry"]]}))
    return Path(made["private"]), trust


def test_keys_create_refuses_to_overwrite_and_names_the_file(tmp_path: Path) -> None:
    setup_keys(tmp_path)
    code, _, err = cairn("keys", "create", "site-a", "--dir", str(tmp_path / "keys"))
    assert code == 6 and "site-a.key" in err and "--force" in err
    code, _, err = cairn("keys", "create", "Bad.Name", "--dir", str(tmp_path / "keys"))
    assert code == 3 and "Traceback" not in err


def test_verify_a_directory_and_a_tarball_with_exit_codes(tmp_path: Path) -> None:
    private, trust = setup_keys(tmp_path)
    key = load_signing_key(private)
    files = ev.bundle("site-a", [key])
    bundles.write_dir(files, tmp_path / "good")
    (tmp_path / "good.tgz").write_bytes(bundles.pack(files))
    for target in ("good", "good.tgz"):
        code, out, err = cairn("evidence", "verify", str(tmp_path / target), "--trust",
                               str(trust), "-o", "json")
        assert code == 0, out + err
        result = json.loads(out)
        assert result["valid"] and result["passed"]
        assert {c["check"]: c["passed"] for c in result["checks"]} == dict.fromkeys(
            ("envelope", "signature", "manifest", "subjects", "snapshot", "recipe",
             "constraints", "freshness", "result"), True)

    failed = ev.bundle("site-a", [key], snap=ev.snapshot("site-a", kernel="4.19.0"))
    bundles.write_dir(failed, tmp_path / "failed")
    code, out, _ = cairn("evidence", "verify", str(tmp_path / "failed"), "--trust", str(trust))
    assert code == 1 and "FAILED" in out

    swapped = {**files, SNAPSHOT: bundles.encode_snapshot(ev.snapshot("site-a", cores=2))}
    swapped[MANIFEST] = manifest_of(swapped)
    bundles.write_dir(swapped, tmp_path / "swapped")
    code, out, _ = cairn("evidence", "verify", str(tmp_path / "swapped"), "--trust",
                         str(trust), "-o", "json")
    assert code == 9  # forged: does not verify (a usage error is 2)
    reasons = {c["check"]: c["reason"] for c in json.loads(out)["checks"] if not c["passed"]}
    assert reasons["snapshot"] == "snapshot-mismatch"


def test_verify_without_a_trust_list_or_with_a_broken_one(tmp_path: Path) -> None:
    code, _, err = cairn("evidence", "verify", str(tmp_path), "--trust",
                         str(tmp_path / "none.yaml"))
    assert code == 4 and "none.yaml" in err
    broken = tmp_path / "trust.yaml"
    broken.write_text("signers:\n  - name: x\n    role: site\n    key: abc\n    colour: red\n")
    code, _, err = cairn("evidence", "verify", str(tmp_path), "--trust", str(broken))
    assert code == 3 and "trust.yaml" in err and "colour" in err and "Traceback" not in err
    code, _, err = cairn("evidence", "verify", "--trust", str(broken))
    assert code in (2, 3)
