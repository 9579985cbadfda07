"""`cairn provision`: a root of trust, one identity per participant, and their startup kits.

    OUT/root/         root.nk (the root's seed: keep it offline), root.pub
    OUT/ca/           ca.pem, ca.key (the federation CA)
    OUT/server/       nats.conf, server.pem, server.key, ca.pem
    OUT/authority/    the authority's keys, roots.txt, revoked.json, ca.pem
    OUT/kits/<name>/  one startup kit per site and admin: <kind>.creds, ca.pem, kit.yaml,
                      README.md (a site's also signing.nk, to mint its workers' credentials)

Run again with more sites or admins in federation.yaml and only the missing kits are made:
nothing that exists is rewritten, so nothing else needs a restart. Distributed: a site runs
`cairn provision request` (keys made and kept at the site), the project admin `cairn
provision sign` (signs the public keys), the site `cairn provision accept`. Readers (outside
systems reading one study) get theirs from `cairn provision reader` (`cairn.trust.readers`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import yaml

from cairn.errors import Conflict, InvalidInput, NotFound
from cairn.names import check_name
from cairn.spec.federation import Federation
from cairn.trust import pki
from cairn.trust.credentials import Identity, Kind, issue, verify_credential
from cairn.trust.natsconfig import AuthorityKeys, render
from cairn.trust.nkeyjwt import KeyKind, kind_of, new_seed, public_key, read_creds

KIT_README = """# Cairn startup kit: {name}

Who: {kind} `{name}` of federation `{federation}`.
Federation: {url}

- `{creds}`: this identity's credential (NATS user JWT + seed). Secret: keep it mode 0600.
- `ca.pem`: the federation CA; clients verify the server against it.
{extra}
Connect: `cairn run ... --nats-url {url} --creds {creds} --tls-ca ca.pem`, or
`CAIRN_CONTEXT={context}` for the `cairn` command. See docs/security.md.
"""


class SiteRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a site sends to be signed: public keys only."""

    site: str
    org: str
    user_key: str
    signing_key: str


def _seed_file(path: Path, kind: KeyKind) -> str:
    """The seed at `path`, made (mode 0600) when missing."""
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    seed = new_seed(kind)
    pki.write_private(path, seed + "\n")
    return seed


def ensure_root(out: Path, federation: str, hosts: list[str]) -> str:
    """The root seed, CA, server certificate and authority keys (made once)."""
    root = _seed_file(out / "root" / "root.nk", KeyKind.OPERATOR)
    (out / "root" / "root.pub").write_text(public_key(root) + "\n")
    ca_dir = out / "ca"
    if not (ca_dir / "ca.pem").exists():
        cert, key = pki.new_ca(federation)
        pki.write_private(ca_dir / "ca.key", key)
        (ca_dir / "ca.pem").write_bytes(cert)
    ca = (ca_dir / "ca.pem").read_bytes()
    server = out / "server"
    if not (server / "server.pem").exists():
        cert, key = pki.new_server_cert(ca, (ca_dir / "ca.key").read_bytes(), hosts,
                                        federation=federation)
        pki.write_private(server / "server.key", key)
        (server / "server.pem").write_bytes(cert)
    (server / "ca.pem").write_bytes(ca)
    auth = out / "authority"
    for name, kind in (("account", KeyKind.ACCOUNT), ("auth", KeyKind.USER),
                       ("sys", KeyKind.USER), ("reader", KeyKind.USER)):
        _seed_file(auth / f"{name}.nk", kind)
    (auth / "roots.txt").write_text(public_key(root) + "\n")
    (auth / "ca.pem").write_bytes(ca)
    if not (auth / "revoked.json").exists():
        (auth / "revoked.json").write_text('{"names": [], "jtis": []}\n')
    return root


def authority_keys(out: Path) -> AuthorityKeys:
    auth = out / "authority"

    def pub(name: str) -> str:
        return public_key((auth / f"{name}.nk").read_text().strip())

    return AuthorityKeys(issuer=pub("account"), auth_user=pub("auth"), sys_user=pub("sys"),
                         reader_user=pub("reader"))


def write_nats_config(out: Path, *, host: str, port: int, monitor_port: int = 0,
                      store_dir: Path | None = None) -> Path:
    server = out / "server"
    text = render(authority_keys(out), host=host, port=port,
                  store_dir=store_dir or (server / "jetstream").resolve(),
                  cert=(server / "server.pem")
                  .resolve(), key=(server / "server.key").resolve(),
                  ca=(server / "ca.pem").resolve(), monitor_port=monitor_port)
    path = server / "nats.conf"
    path.write_text(text)
    return path


def _write_kit(out: Path, identity: Identity, jwt: str, seed: str, *, url: str,
               federation: str, signing_seed: str | None = None) -> Path:
    kit = out / "kits" / identity.name
    creds = f"{identity.kind.value}.creds"
    from cairn.trust.nkeyjwt import creds_file_text

    pki.write_private(kit / creds, creds_file_text(jwt, seed))
    if signing_seed is not None:
        pki.write_private(kit / "signing.nk", signing_seed + "\n")
    (kit / "ca.pem").write_bytes((out / "ca" / "ca.pem").read_bytes())
    (kit / "roots.txt").write_text((out / "root" / "root.pub").read_text())
    meta = {"federation": federation, "kind": identity.kind.value, "name": identity.name,
            "nats_url": url}
    (kit / "kit.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    context = {"nats_url": url, "creds": str((kit / creds).resolve()),
               "tls_ca": str((kit / "ca.pem").resolve()), "federation": federation}
    if identity.kind is Kind.ADMIN:
        context["actor"] = identity.name
    (kit / "context.yaml").write_text(yaml.safe_dump(context, sort_keys=False))
    extra = "- `signing.nk`: the site's key for its workers' credentials. Secret.\n" \
        if signing_seed else ""
    (kit / "README.md").write_text(KIT_README.format(
        name=identity.name, kind=identity.kind.value, federation=federation, url=url,
        creds=creds, extra=extra, context=kit / "context.yaml"))
    return kit


def _has_kit(out: Path, name: str, kinds: tuple[Kind, ...]) -> bool:
    """Whether `name` has its kit already; a kit of another kind under that name (a reader
    called like an admin) is refused, since revocation is by name.

    Raises:
        Conflict: the name's kit is another kind's.
    """
    kit = out / "kits" / name
    if not kit.exists():
        return False
    meta = yaml.safe_load((kit / "kit.yaml").read_text()) if (kit / "kit.yaml").is_file() \
        else None
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if kind is not None and kind not in {k.value for k in kinds}:
        raise Conflict(f"{name} is taken by the {kind} whose kit is {kit}; every "
                       "identity's name is its own (revocation is by name): give the "
                       f"{kinds[0].value} another name", field="name")
    return True


def provision(fed: Federation, out: Path, *, url: str, hosts: list[str], port: int,
              monitor_port: int = 0) -> list[Path]:
    """Write (or complete) the root of trust and every missing kit; returns new kits."""
    root = ensure_root(out, fed.federation, hosts)
    write_nats_config(out, host=hosts[-1] if hosts else "127.0.0.1", port=port,
                      monitor_port=monitor_port)
    made: list[Path] = []
    for site in fed.sites:
        if _has_kit(out, site.name, (Kind.HUB, Kind.SITE)):
            continue
        seed, signing = new_seed(KeyKind.USER), new_seed(KeyKind.ACCOUNT)
        kind = Kind.HUB if site.name == fed.hub else Kind.SITE
        identity = Identity(kind=kind, name=site.name, site=site.name, org=site.org,
                            signing_key=public_key(signing))
        made.append(_write_kit(out, identity, issue(identity, public_key(seed), root), seed,
                               url=url, federation=fed.federation, signing_seed=signing))
    for admin in fed.admins:
        if _has_kit(out, admin.name, (Kind.ADMIN,)):
            continue
        seed = new_seed(KeyKind.USER)
        identity = Identity(kind=Kind.ADMIN, name=admin.name, org=admin.org,
                            admin_role=str(admin.role))
        made.append(_write_kit(out, identity, issue(identity, public_key(seed), root), seed,
                               url=url, federation=fed.federation))
    return made


def admin_kit(out: Path, name: str, *, org: str, role: str = "member", url: str,
              federation: str) -> Path:
    """The kit of admin `name`, made when missing (an admin added to a study after
    provisioning still needs a credential of its own to sign with)."""
    kit = out / "kits" / name
    if _has_kit(out, name, (Kind.ADMIN,)):
        return kit
    from cairn.spec.federation import ADMIN_NAME

    if not ADMIN_NAME.fullmatch(name):
        raise InvalidInput(f"{name!r} is not an admin name (name@org)", field="admin")
    root = (out / "root" / "root.nk").read_text().strip()
    seed = new_seed(KeyKind.USER)
    identity = Identity(kind=Kind.ADMIN, name=name, org=org, admin_role=role)
    return _write_kit(out, identity, issue(identity, public_key(seed), root), seed, url=url,
                      federation=federation)


# -- distributed provisioning ------------------------------------------------------------

def request_site(site: str, org: str, kit: Path) -> Path:
    """At the site: make its keys (kept in `kit`) and the request holding only public keys."""
    check_name(site, "site")
    check_name(org, "org")
    seed = _seed_file(kit / "user.nk", KeyKind.USER)
    signing = _seed_file(kit / "signing.nk", KeyKind.ACCOUNT)
    req = SiteRequest(site=site, org=org, user_key=public_key(seed),
                      signing_key=public_key(signing))
    path = kit / "request.json"
    path.write_bytes(msgspec.json.format(msgspec.json.encode(req)) + b"\n")
    return path


def sign_site_request(root_dir: Path, request: Path, fed: Federation) -> str:
    """At the project admin: sign a site's request; the site must be in federation.yaml."""
    try:
        req = msgspec.json.decode(request.read_bytes(), type=SiteRequest)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidInput(f"not a site request: {exc}", file=str(request)) from None
    check_name(req.site, "site")
    declared = fed.site(req.site)
    if declared is None:
        raise NotFound(f"site {req.site!r} is not in federation.yaml: add it first",
                       file=str(request), field="site")
    if declared.org != req.org:
        raise Conflict(f"site {req.site!r} belongs to org {declared.org!r}, not {req.org!r}",
                       file=str(request), field="org")
    if kind_of(req.user_key) is not KeyKind.USER or \
            kind_of(req.signing_key) is not KeyKind.ACCOUNT:
        raise InvalidInput("user_key must be a U... key and signing_key an A... key",
                           file=str(request))
    root = (root_dir / "root" / "root.nk").read_text().strip()
    kind = Kind.HUB if req.site == fed.hub else Kind.SITE
    identity = Identity(kind=kind, name=req.site, site=req.site, org=req.org,
                        signing_key=req.signing_key)
    return issue(identity, req.user_key, root)


def accept_site(kit: Path, jwt: str, *, url: str, ca: bytes, federation: str) -> Path:
    """At the site: put the signed credential beside the site's own seed."""
    from cairn.trust.nkeyjwt import creds_file_text, peek_claims

    seed = (kit / "user.nk").read_text().strip()
    if peek_claims(jwt).get("sub") != public_key(seed):
        raise Conflict("this credential was signed for another key, not this kit's")
    kind = str(peek_claims(jwt).get("cairn", {}).get("kind", "site"))
    pki.write_private(kit / f"{kind}.creds", creds_file_text(jwt, seed))
    (kit / "ca.pem").write_bytes(ca)
    (kit / "kit.yaml").write_text(yaml.safe_dump(
        {"federation": federation, "kind": kind, "nats_url": url}, sort_keys=False))
    return kit / f"{kind}.creds"


# -- revocation --------------------------------------------------------------------------

def revoke(out: Path, name: str) -> Path:
    """Refuse an identity (a site, an admin, a reader, a worker's launch id) from now on,
    live."""
    path = out / "authority" / "revoked.json"
    data = json.loads(path.read_text()) if path.exists() else {"names": [], "jtis": []}
    if name not in data["names"]:
        data["names"].append(name)
    data["updated"] = int(time.time())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
    return path


def check_kit(kit_creds: Path, roots_file: Path) -> Identity:
    """Verify a kit's credential against the roots (what `cairn provision check` prints)."""
    jwt, _ = read_creds(kit_creds.read_text())
    roots = frozenset(x.strip() for x in roots_file.read_text().split() if x.strip())
    return verify_credential(jwt, roots).identity
