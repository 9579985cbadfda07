"""A recipe's evidence status (CONFIRMED, SINGLE, CONTESTED, FAILING, UNTESTED), each from
real signed bundles, through the library and through `cairn recipe show`."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import yaml

from cairn.evidence import bundle as bundles
from cairn.evidence.dashboard import recipe_evidence
from cairn.evidence.keys import SigningKey
from cairn.recipes import default_catalog_dir
from tests.fixtures import evidence as ev
from tests.fixtures.evidence import fresh_now  # noqa: F401 - autouse: NOW per test
from tests.unit.test_evidence_cli import cairn

LAB_A, LAB_B, STRANGER = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
TRUST = ev.trust_of(("lab-a", "community", LAB_A), ("lab-b", "site", LAB_B))
NOW = datetime.now(UTC)


RESOLVED = msgspec.to_builtins(ev.recipe())
RESOLVED.pop("provenance", None)


def passing(site: str, key: SigningKey) -> bundles.BundleFiles:
    return ev.bundle(site, [key], validated_at=NOW - timedelta(hours=1))


def failing(site: str, key: SigningKey) -> bundles.BundleFiles:
    return ev.bundle(site, [key], snap=ev.snapshot(site, kernel="4.19.0"),
                     validated_at=NOW - timedelta(hours=1))


def state_of(*found: bundles.BundleFiles) -> str:
    status = recipe_evidence(ev.CPU_RECIPE, RESOLVED, [(f"b{i}", f) for i, f in enumerate(found)],
                             TRUST, now=NOW)
    return status.state


def test_each_state_from_signed_bundles() -> None:
    assert state_of() == "UNTESTED"
    assert state_of(passing("site-a", STRANGER)) == "UNTESTED"  # untrusted never counts
    assert state_of(passing("site-a", LAB_A)) == "SINGLE"
    # The same signer on a second site is not independent confirmation.
    assert state_of(passing("site-a", LAB_A), passing("site-b", LAB_A)) == "SINGLE"
    assert state_of(passing("site-a", LAB_A), passing("site-b", LAB_B)) == "CONFIRMED"
    assert state_of(passing("site-a", LAB_A), failing("site-b", LAB_B)) == "CONTESTED"
    assert state_of(failing("site-b", LAB_B)) == "FAILING"


def test_the_newest_result_per_signer_and_site_counts() -> None:
    old_fail = ev.bundle("site-a", [LAB_A], snap=ev.snapshot("site-a", kernel="4.19.0"),
                         validated_at=NOW - timedelta(days=2))
    assert state_of(old_fail, passing("site-a", LAB_A)) == "SINGLE"


def test_evidence_for_another_version_of_the_recipe_does_not_count() -> None:
    status = recipe_evidence(ev.CPU_RECIPE, {**RESOLVED, "description": "changed since"},
                             [("old", passing("site-a", LAB_A))], TRUST, now=NOW)
    assert status.state == "UNTESTED"
    assert status.attestations[0].why_not == "attests an older version of the recipe"


def test_recipe_show_reports_the_state_hardware_and_signers(tmp_path: Path) -> None:
    catalog = tmp_path / "recipes"
    shutil.copytree(default_catalog_dir(), catalog)
    folder = catalog / "evidence" / ev.CPU_RECIPE
    bundles.write_dir(passing("site-a", LAB_A), folder / "lab-a")
    (folder / "lab-b.tgz").write_bytes(bundles.pack(passing("site-b", LAB_B)))
    trust = tmp_path / "trust.yaml"
    trust.write_text(yaml.safe_dump({"signers": [
        {"name": name, "role": role, "key": key.verifying_key.public_raw_b64()}
        for name, role, key in (("lab-a", "community", LAB_A), ("lab-b", "site", LAB_B))]}))
    code, out, err = cairn("recipe", "show", ev.CPU_RECIPE, "--catalog", str(catalog),
                           "--trust", str(trust), "-o", "json")
    assert code == 0, err
    found = json.loads(out)["evidence"]
    assert found["state"] == "CONFIRMED"
    assert found["signers"] == ["lab-a", "lab-b"]
    assert found["hardware"] == ["1x node: CPU AMD EPYC 9654"]
    assert {a["site"] for a in found["attestations"]} == {"site-a", "site-b"}
    code, out, _ = cairn("recipe", "show", ev.CPU_RECIPE, "--catalog", str(catalog),
                         "--trust", str(trust), "-o", "table", env={"COLUMNS": "200"})
    assert code == 0 and "evidence: CONFIRMED" in out
