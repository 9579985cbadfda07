"""`cairn provision reader`: the kit of an outside system that reads one study, its names,
and what it is refused (no network: the broker's side is tests/integration/test_reader_*)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from cairn.cli.main import main
from cairn.client.readers import refuse_if_reader
from cairn.errors import Conflict, PermissionDenied
from cairn.runtime import context as context_file
from cairn.spec.federation import parse_federation
from cairn.subjects.table import consumer_owner, js_consumer_create
from cairn.trust.credentials import Kind, verify_credential
from cairn.trust.nkeyjwt import public_key, read_creds
from cairn.trust.permissions import Membership, permissions
from cairn.trust.provision import provision, revoke
from tests.unit.test_trust_provision import FED


@pytest.fixture
def root(tmp_path: Path) -> Path:
    out = tmp_path / "trust"
    provision(parse_federation(FED), out, url="tls://hub.example:4222",
              hosts=["localhost"], port=4222)
    return out


def _cli(*args: str | Path) -> int:
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_a_reader_kit_holds_what_an_outside_system_needs_and_the_broker_grants(
        root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("provision", "reader", "dash@org-a", "--study", "s1", "--root", root,
                "-o", "json") == 0
    made = json.loads(capsys.readouterr().out)
    kit = Path(made["kit"])
    assert kit == root / "kits" / "dash@org-a" and made["made"] is True
    assert made["streams"] == ["STUDY_s1"]
    assert stat.S_IMODE((kit / "reader.creds").stat().st_mode) == 0o600
    jwt, seed = read_creds((kit / "reader.creds").read_text())
    roots = frozenset((root / "root" / "root.pub").read_text().split())
    identity = verify_credential(jwt, roots).identity
    assert (identity.kind, identity.name, identity.study, identity.data) == (
        Kind.READER, "dash@org-a", "s1", False)
    assert (kit / "ca.pem").read_bytes() == (root / "ca" / "ca.pem").read_bytes()
    meta = yaml.safe_load((kit / "kit.yaml").read_text())
    assert meta["nats_url"] == "tls://hub.example:4222" and meta["federation"] == "fed"
    assert meta["streams"] == [{"name": "STUDY_s1", "subjects": ["cairn.study.s1.>"],
                                "store": "events", "what": meta["streams"][0]["what"]}]
    # The inbox and consumer names the kit names are exactly what the broker grants it.
    user = public_key(seed)
    granted = permissions(identity, user, {"s1": Membership(sites=frozenset({"hub"}))})
    assert meta["inbox_prefix"] == f"_INBOX.{user}"
    assert f"{meta['inbox_prefix']}.>" in granted.sub_allow
    assert meta["consumer_owner"] == consumer_owner("reader", "dash@org-a")
    assert len(meta["consumer_names"]) == 8
    for name in meta["consumer_names"]:
        assert js_consumer_create("STUDY_s1", name, ">") in granted.pub_allow
    assert not [p for p in granted.pub_allow if p.startswith("cairn.")], "it publishes nothing"
    ctx = context_file.load(kit / "context.yaml")
    assert ctx is not None and ctx.study == "s1" and ctx.creds == str(kit / "reader.creds")
    assert "_INBOX." in (kit / "README.md").read_text()


def test_with_data_its_kit_lists_the_data_plane_and_job_files(root: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    elsewhere = tmp_path / "handed-over"
    assert _cli("provision", "reader", "lake@org-a", "--study", "s1", "--data", "--root",
                root, "--out", elsewhere, "-o", "json") == 0
    made = json.loads(capsys.readouterr().out)
    assert made["streams"] == ["STUDY_s1", "DATA_s1", "FILES_s1"]
    assert Path(made["kit"]) == elsewhere and (elsewhere / "reader.creds").is_file()
    # The provisioning folder keeps its record (no secret), so the name stays taken.
    record = root / "kits" / "lake@org-a"
    assert [p.name for p in record.iterdir()] == ["kit.yaml"]
    assert yaml.safe_load((record / "kit.yaml").read_text())["kind"] == "reader"
    assert _cli("provision", "reader", "lake@org-a", "--study", "s1", "--root", root) == 6


def test_provisioning_a_reader_again_changes_nothing(root: Path) -> None:
    assert _cli("provision", "reader", "dash@org-a", "--study", "s1", "--root", root) == 0
    creds = (root / "kits" / "dash@org-a" / "reader.creds").read_bytes()
    assert _cli("provision", "reader", "dash@org-a", "--study", "s1", "--root", root) == 0
    assert (root / "kits" / "dash@org-a" / "reader.creds").read_bytes() == creds
    # Another study or data right under the same name is a different identity: refused.
    assert _cli("provision", "reader", "dash@org-a", "--study", "s2", "--root", root) == 6
    assert _cli("provision", "reader", "dash@org-a", "--study", "s1", "--data",
                "--root", root) == 6


@pytest.mark.parametrize("name, field", [
    ("dashboard", "name"), ("a b@org-a", "name"), ("dash@Org", "name"), ("dash@org.x", "name"),
    ("@org-a", "name"), ("dash@-org", "org"), ("d" * 200 + "@org-a", "name"),
])
def test_a_reader_name_is_name_at_org(root: Path, name: str, field: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("provision", "reader", name, "--study", "s1", "--root", root) == 3
    err = capsys.readouterr().err
    assert f"error: {field}:" in err and "Traceback" not in err
    assert not (root / "kits" / name).exists()


def test_a_bad_study_or_folder_is_refused(root: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("provision", "reader", "dash@org-a", "--study", "s1.>", "--root", root) == 3
    assert "study" in capsys.readouterr().err
    assert _cli("provision", "reader", "dash@org-a", "--study", "s1", "--root", tmp_path) == 4
    assert "not a provisioning folder" in capsys.readouterr().err
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    assert _cli("provision", "reader", "dash@org-a", "--study", "s1", "--root", root,
                "--out", full) == 6
    assert "not empty" in capsys.readouterr().err
    assert (full / "keep.txt").read_text() == "mine"
    (root / "ca" / "ca.pem").unlink()
    assert _cli("provision", "reader", "dash@org-a", "--study", "s1", "--root", root) == 4
    err = capsys.readouterr().err
    assert "ca.pem is missing" in err and "Traceback" not in err
    assert not (root / "kits" / "dash@org-a").exists()


def test_a_name_is_one_identitys_only(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # An admin's name: revoking one would revoke the other.
    assert _cli("provision", "reader", "alice@org-a", "--study", "s1", "--root", root) == 6
    assert "admin" in capsys.readouterr().err
    # A revoked name is never handed out again.
    revoke(root, "gone@org-a")
    assert _cli("provision", "reader", "gone@org-a", "--study", "s1", "--root", root) == 6
    assert "revoked" in capsys.readouterr().err
    # An admin added later under a reader's name is refused, not silently left without a kit.
    assert _cli("provision", "reader", "carol@org-a", "--study", "s1", "--root", root) == 0
    more = FED.replace("admins:\n", "admins:\n  - {name: carol@org-a, org: org-a, "
                                    "role: member}\n")
    with pytest.raises(Conflict, match="carol@org-a is taken by the reader"):
        provision(parse_federation(more), root, url="tls://hub.example:4222",
                  hosts=["localhost"], port=4222)


def test_two_readers_never_share_consumer_names(root: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # A reader whose owner token equals the next one's (a 48-bit hash can collide).
    squatter = root / "kits" / "old@org-b"
    squatter.mkdir(parents=True)
    (squatter / "kit.yaml").write_text(yaml.safe_dump({
        "kind": "reader", "name": "old@org-b",
        "consumer_owner": consumer_owner("reader", "new@org-a")}))
    assert _cli("provision", "reader", "new@org-a", "--study", "s1", "--root", root) == 6
    assert "old@org-b" in capsys.readouterr().err
    assert not (root / "kits" / "new@org-a").exists()


def test_a_readers_session_is_refused_requests_before_sending(root: Path) -> None:
    assert _cli("provision", "reader", "dash@org-a", "--study", "s1", "--root", root) == 0
    with pytest.raises(PermissionDenied, match=r"reader dash@org-a.*study s1"):
        refuse_if_reader(str(root / "kits" / "dash@org-a" / "reader.creds"), "`jobs` asks")
    refuse_if_reader(str(root / "kits" / "alice@org-a" / "admin.creds"), "`jobs` asks")
    refuse_if_reader(None, "an insecure federation's session")
