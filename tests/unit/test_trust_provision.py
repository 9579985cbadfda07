"""`cairn provision`: central and distributed provisioning, kits, and hostile input."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from cairn.cli.main import main
from cairn.errors import NotFound, PermissionDenied
from cairn.spec.federation import parse_federation
from cairn.trust.credentials import Kind, verify_credential
from cairn.trust.nkeyjwt import read_creds
from cairn.trust.provision import (
    accept_site,
    check_kit,
    provision,
    read_signed_site,
    request_site,
    revoke,
    sign_site_request,
)

FED = """\
federation: fed
hub: hub
sites:
  - {name: hub, org: coord}
  - {name: site-a, org: org-a}
admins:
  - {name: alice@org-a, org: org-a, role: lead}
studies:
  s1: {sites: [hub, site-a], admins: [alice@org-a]}
"""


def _provision(out: Path, text: str = FED) -> list[Path]:
    return provision(parse_federation(text), out, url="tls://127.0.0.1:4222",
                     hosts=["localhost", "127.0.0.1"], port=4222)


def test_central_provisioning_writes_a_kit_per_participant_with_private_secrets(
        tmp_path: Path) -> None:
    made = _provision(tmp_path)
    assert sorted(p.name for p in made) == ["alice@org-a", "api", "hub", "site-a"]
    roots = frozenset((tmp_path / "root" / "root.pub").read_text().split())
    api = check_kit(tmp_path / "kits" / "api" / "api.creds", tmp_path / "root" / "root.pub")
    assert api.kind is Kind.API and api.name == "api"
    site = check_kit(tmp_path / "kits" / "site-a" / "site.creds", tmp_path / "root" / "root.pub")
    assert site.kind is Kind.SITE and site.signing_key.startswith("A")
    jwt, _ = read_creds((tmp_path / "kits" / "alice@org-a" / "admin.creds").read_text())
    assert verify_credential(jwt, roots).identity.admin_role == "lead"
    for secret in ("root/root.nk", "ca/ca.key", "kits/site-a/site.creds", "kits/api/api.creds",
                   "kits/alice@org-a/client.key",
                   "kits/site-a/signing.nk", "authority/account.nk", "server/server.key"):
        assert stat.S_IMODE((tmp_path / secret).stat().st_mode) == 0o600, secret
    conf = (tmp_path / "server" / "nats.conf").read_text()
    assert "auth_callout" in conf and "tls {" in conf and "http:" not in conf


def test_provisioning_again_adds_only_what_is_new(tmp_path: Path) -> None:
    _provision(tmp_path)
    before = (tmp_path / "kits" / "site-a" / "site.creds").read_bytes()
    more = FED.replace("  - {name: site-a, org: org-a}\n",
                       "  - {name: site-a, org: org-a}\n  - {name: site-c, org: org-c}\n")
    assert [p.name for p in _provision(tmp_path, more)] == ["site-c"]
    assert (tmp_path / "kits" / "site-a" / "site.creds").read_bytes() == before


def test_distributed_provisioning_keeps_private_keys_at_the_site(tmp_path: Path) -> None:
    admin, kit = tmp_path / "admin", tmp_path / "site-kit"
    _provision(admin)
    req = request_site("site-a", "org-a", kit)
    body = req.read_text()
    # Only public parts leave the site: no value is an nkey seed (seeds start with "S"; a
    # public key may contain "SU" anywhere but at its start), and no seed the kit holds.
    values = [v for v in json.loads(body).values() if isinstance(v, str)]
    assert values and not [v for v in values if v.startswith("S")]
    seeds = [line.strip() for f in kit.rglob("*") if f.is_file()
             for line in f.read_text(errors="replace").splitlines()
             if line.strip().startswith(("SU", "SA", "SO"))]
    assert seeds and not [seed for seed in seeds if seed in body]
    fed = parse_federation(FED)
    (tmp_path / "site-a.jwt").write_text(sign_site_request(admin, req, fed) + "\n")
    signed = read_signed_site(kit, tmp_path / "site-a.jwt", admin / "ca" / "ca.pem",
                              admin / "root" / "root.pub")
    creds = accept_site(kit, signed, url="tls://x:1", federation="fed")
    identity = check_kit(creds, admin / "root" / "root.pub")
    assert identity.name == "site-a" and identity.kind is Kind.SITE
    other = request_site("site-z", "org-z", tmp_path / "z")
    with pytest.raises(NotFound, match=r"not in federation\.yaml"):
        sign_site_request(admin, other, fed)


def test_revoke_is_recorded_for_the_authority(tmp_path: Path) -> None:
    _provision(tmp_path)
    revoke(tmp_path, "site-a")
    assert json.loads((tmp_path / "authority" / "revoked.json").read_text())["names"] == [
        "site-a"]


@pytest.mark.parametrize("bad", ["s1.>", "S1", "a b", "*"])
def test_a_bad_study_name_is_refused_at_provisioning(tmp_path: Path, bad: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "fed.yaml").write_text(FED.replace("  s1:", f"  {json.dumps(bad)}:"))
    with pytest.raises(SystemExit) as exited:
        main(["provision", str(tmp_path / "fed.yaml"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exited.value.code == 3, err
    assert "fed.yaml:" in err and "study" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_accept_checks_everything_before_it_writes(tmp_path: Path) -> None:
    """A credential checked against another federation's root is refused (exit 5), and the
    kit is left as it was: no creds, CA or roots written."""
    admin, other, kit = tmp_path / "admin", tmp_path / "other", tmp_path / "site-kit"
    _provision(admin)
    _provision(other)
    req = request_site("site-a", "org-a", kit)
    jwt = tmp_path / "site-a.jwt"
    jwt.write_text(sign_site_request(admin, req, parse_federation(FED)) + "\n")
    before = sorted(p.name for p in kit.iterdir())
    with pytest.raises(PermissionDenied, match="does not trust"):
        read_signed_site(kit, jwt, admin / "ca" / "ca.pem", other / "root" / "root.pub")
    with pytest.raises(SystemExit) as exited:
        main(["provision", "accept", str(jwt), "-k", str(kit), "--ca",
              str(admin / "ca" / "ca.pem"), "--root-pub", str(other / "root" / "root.pub"),
              "--url", "tls://x:1"])
    assert exited.value.code == 5
    assert sorted(p.name for p in kit.iterdir()) == before


def test_a_folder_provisioned_before_gets_the_api_kit_and_client_certificates(
        tmp_path: Path) -> None:
    _provision(tmp_path)
    kit = tmp_path / "kits" / "alice@org-a"
    creds = (kit / "admin.creds").read_bytes()
    for old in ("client.pem", "client.key"):
        (kit / old).unlink()
    shutil.rmtree(tmp_path / "kits" / "api")
    assert sorted(p.name for p in _provision(tmp_path)) == ["api"]
    assert (kit / "client.pem").is_file() and (kit / "admin.creds").read_bytes() == creds
