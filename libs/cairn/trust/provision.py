"""`cairn provision`: a root of trust, one identity per participant, and their startup kits.

    OUT/root/         root.nk (the root's seed: keep it offline), root.pub
    OUT/ca/           ca.pem, ca.key (the federation CA)
    OUT/server/       nats.conf, server.pem, server.key, ca.pem
    OUT/authority/    the authority's keys, roots.txt, revoked.json, ca.pem
    OUT/kits/<name>/  one startup kit per site and admin: <kind>.creds, ca.pem, kit.yaml,
                      README.md (a site's also signing.nk, to mint its workers' credentials)
    OUT/kits/api/     the HTTP API service's own kit (`api.creds`: reads, and passes on
                      callers' signed requests; no event, no request of its own)

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

from cairn import files
from cairn.errors import Conflict, InvalidInput, NotFound
from cairn.files import yaml_text
from cairn.names import check_name
from cairn.spec.federation import Federation
from cairn.trust import pki
from cairn.trust.credentials import API_NAME, Identity, Kind, issue, verify_credential
from cairn.trust.kitfiles import read_ca, read_pem, read_revoked, read_seed
from cairn.trust.natsconfig import authority_keys as authority_keys
from cairn.trust.natsconfig import write_nats_config as write_nats_config
from cairn.trust.nkeyjwt import (
    CredentialError,
    KeyKind,
    kind_of,
    new_seed,
    public_key,
    read_creds_file,
    read_jwt_file,
    read_roots_file,
)

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
        return read_seed(path)
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
    ca = read_ca(ca_dir / "ca.pem")
    server = out / "server"
    if not (server / "server.pem").exists():
        cert, key = pki.new_server_cert(ca, read_pem(ca_dir / "ca.key"), hosts,
                                        federation=federation)
        pki.write_private(server / "server.key", key)
        (server / "server.pem").write_bytes(cert)
    pki.write_route_cert(server, ca_dir, hosts, federation=federation)
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


def _write_kit(out: Path, identity: Identity, jwt: str, seed: str, *, url: str,
               federation: str, signing_seed: str | None = None) -> Path:
    kit = out / "kits" / identity.name
    creds = f"{identity.kind.value}.creds"
    from cairn.trust.nkeyjwt import creds_file_text

    pki.write_private(kit / creds, creds_file_text(jwt, seed))
    if identity.kind in (Kind.ADMIN, Kind.READER):
        pki.write_client_cert(out / "ca", kit, identity.name, jwt, federation=federation)
    if signing_seed is not None:
        pki.write_private(kit / "signing.nk", signing_seed + "\n")
    (kit / "ca.pem").write_bytes(read_ca(out / "ca" / "ca.pem"))
    (kit / "roots.txt").write_text("\n".join(sorted(read_roots_file(out / "root" / "root.pub")))
                                   + "\n")
    meta = {"federation": federation, "kind": identity.kind.value, "name": identity.name,
            "nats_url": url}
    (kit / "kit.yaml").write_text(yaml_text(meta))
    context = {"nats_url": url, "creds": str((kit / creds).resolve()),
               "tls_ca": str((kit / "ca.pem").resolve()), "federation": federation}
    if identity.kind is Kind.ADMIN:
        context["actor"] = identity.name
    (kit / "context.yaml").write_text(yaml_text(context))
    extra = "- `signing.nk`: the site's key for its workers' credentials. Secret.\n" \
        if signing_seed else ""
    if (kit / pki.CLIENT_CERT).exists():
        extra += ("- `client.pem`, `client.key`: this identity's client certificate for the "
                  "HTTP API's mutual TLS (docs/api.md). The key is secret.\n")
    (kit / "README.md").write_text(KIT_README.format(
        name=identity.name, kind=identity.kind.value, federation=federation, url=url,
        creds=creds, extra=extra, context=kit / "context.yaml"))
    return kit


def _add_client_cert(out: Path, kit: Path, *, federation: str) -> None:
    """An admin kit made before kits held client certificates gets one (a file added;
    nothing there is rewritten)."""
    creds = kit / f"{Kind.ADMIN.value}.creds"
    if (kit / pki.CLIENT_CERT).exists() or not creds.is_file():
        return
    jwt, _ = read_creds_file(creds)
    identity = verify_credential(jwt, read_roots_file(out / "root" / "root.pub")).identity
    pki.write_client_cert(out / "ca", kit, identity.name, jwt, federation=federation)


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


def api_kit(out: Path, *, url: str, federation: str) -> Path:
    """The HTTP API service's kit (`Kind.API`), made when missing.

    Raises:
        Conflict: a site or admin holds the name `api` (revocation is by name).
    """
    kit = out / "kits" / API_NAME
    if _has_kit(out, API_NAME, (Kind.API,)):
        return kit
    root = read_seed(out / "root" / "root.nk")
    seed = new_seed(KeyKind.USER)
    identity = Identity(kind=Kind.API, name=API_NAME)
    return _write_kit(out, identity, issue(identity, public_key(seed), root), seed, url=url,
                      federation=federation)


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
            _add_client_cert(out, out / "kits" / admin.name, federation=fed.federation)
            continue
        seed = new_seed(KeyKind.USER)
        identity = Identity(kind=Kind.ADMIN, name=admin.name, org=admin.org,
                            admin_role=str(admin.role))
        made.append(_write_kit(out, identity, issue(identity, public_key(seed), root), seed,
                               url=url, federation=fed.federation))
    if fed.site(API_NAME) is None and not (out / "kits" / API_NAME).exists():
        made.append(api_kit(out, url=url, federation=fed.federation))
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
    root = read_seed(out / "root" / "root.nk")
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
    """At the project admin: sign a site's request; the site must be in federation.yaml.

    Raises:
        InvalidInput: the request file is unreadable or not a site request (naming it).
        NotFound: the site is not in federation.yaml.
        Conflict: it is, under another org.
    """
    req = read_site_request(request)
    declared = fed.site(req.site)
    if declared is None:
        raise NotFound(f"site {req.site!r} is not in federation.yaml: add it first",
                       file=str(request), field="site")
    if declared.org != req.org:
        raise Conflict(f"site {req.site!r} belongs to org {declared.org!r}, not {req.org!r}",
                       file=str(request), field="org")
    root = read_seed(root_dir / "root" / "root.nk")
    kind = Kind.HUB if req.site == fed.hub else Kind.SITE
    identity = Identity(kind=kind, name=req.site, site=req.site, org=req.org,
                        signing_key=req.signing_key)
    return issue(identity, req.user_key, root)


def read_site_request(path: Path) -> SiteRequest:
    """A site's request file (`cairn provision request`), read bounded and checked.

    Raises:
        InvalidInput: naming the file: unreadable, too large, not a site request, a bad
            name, or keys of the wrong kind.
    """
    data = files.read_bytes(path, limit=files.SMALL_FILE_BYTES)
    try:
        req = msgspec.json.decode(data, type=SiteRequest)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise InvalidInput(f"not a site request: {exc}", file=str(path)) from None
    try:
        check_name(req.site, "site")
        check_name(req.org, "org")
    except InvalidInput as exc:
        raise InvalidInput(exc.message, file=str(path), field=exc.field) from None
    for field, want in (("user_key", KeyKind.USER), ("signing_key", KeyKind.ACCOUNT)):
        key = getattr(req, field)
        try:
            kind = kind_of(key)
        except CredentialError as exc:
            raise InvalidInput(str(exc), file=str(path), field=field) from None
        if kind is not want:
            raise InvalidInput("user_key must be a U... key and signing_key an A... key",
                               file=str(path), field=field)
    return req


class SignedSite(msgspec.Struct, frozen=True, kw_only=True):
    """What a site received back from the project admin, read and checked (nothing
    written yet): `cairn provision accept`'s input."""

    jwt: str
    ca: bytes
    roots: frozenset[str]
    identity: Identity


def read_signed_site(kit: Path, jwt_file: Path, ca_file: Path, roots_file: Path) -> SignedSite:
    """The signed credential, CA and root key files for `kit`, each read bounded, and the
    credential checked against the root and against the kit's own key.

    Raises:
        InvalidInput: a file is unreadable, too large, or not what it should be (naming it).
        PermissionDenied: the credential does not verify against the root.
        Conflict: it was signed for another key than the kit's.
    """
    jwt = read_jwt_file(jwt_file)
    ca = read_ca(ca_file)
    roots = read_roots_file(roots_file)
    seed = read_seed(kit / "user.nk")
    verified = verify_credential(jwt, roots)
    if verified.user_key != public_key(seed):
        raise Conflict("this credential was signed for another key, not this kit's",
                       file=str(jwt_file))
    return SignedSite(jwt=jwt, ca=ca, roots=roots, identity=verified.identity)


def accept_site(kit: Path, signed: SignedSite, *, url: str, federation: str) -> Path:
    """At the site: put the signed credential beside the site's own seed, with the CA and
    the roots it was checked against."""
    from cairn.trust.nkeyjwt import creds_file_text

    seed = read_seed(kit / "user.nk")
    kind = signed.identity.kind.value
    pki.write_private(kit / f"{kind}.creds", creds_file_text(signed.jwt, seed))
    (kit / "ca.pem").write_bytes(signed.ca)
    (kit / "roots.txt").write_text("\n".join(sorted(signed.roots)) + "\n")
    (kit / "kit.yaml").write_text(yaml_text(
        {"federation": federation, "kind": kind, "nats_url": url}))
    return kit / f"{kind}.creds"


# -- revocation --------------------------------------------------------------------------

def revoke(out: Path, name: str) -> Path:
    """Refuse an identity (a site, an admin, a reader, a worker's launch id) from now on,
    live."""
    path = out / "authority" / "revoked.json"
    data = read_revoked(path) if path.exists() else {"names": [], "jtis": []}
    if name not in data["names"]:
        data["names"].append(name)
    data["updated"] = int(time.time())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
    return path


def check_kit(kit_creds: Path, roots_file: Path) -> Identity:
    """Verify a kit's credential against the roots (what `cairn provision check` prints).

    Raises:
        InvalidInput: a file is unreadable or not what it should be (naming it).
        PermissionDenied: the credential does not verify against the roots.
    """
    jwt, _ = read_creds_file(kit_creds)
    return verify_credential(jwt, read_roots_file(roots_file)).identity
