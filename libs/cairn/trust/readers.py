"""Readers: outside systems that read one study's event streams, and nothing else.

`cairn provision reader NAME --study S [--data] --root DIR` issues a reader credential (signed
by the federation root, like an admin's) and writes its startup kit:

    reader.creds   the credential: NATS user JWT + nkey seed (secret, 0600)
    ca.pem         the federation CA (clients verify the server against it)
    roots.txt      the root's public key (`cairn provision check reader.creds --roots ...`)
    kit.yaml       who it is, its study, its streams, its inbox prefix and consumer names
    context.yaml   for the `cairn` command (`cairn events tail`, `cairn replay`)
    README.md      how to connect with any NATS client

What a reader may read comes from the subject table (`Role.READER`, `Role.DATA_READER`), and
so do the streams its kit lists: there is no second list to drift.

A reader's name is `name@org`, like an admin's. Revocation is by name, and names are shared
by every kind of identity, so a reader must never be called what another identity is: site
names cannot hold an `@`, admins' kits all live in the provisioning folder (where the name
is checked), and a later `cairn provision` refuses an admin whose name a reader holds. The
`@org` also says which organisation answers for the system reading.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cairn.errors import Conflict, InvalidInput, NotFound
from cairn.files import yaml_text
from cairn.names import check_name
from cairn.subjects.table import (
    EPHEMERAL_SLOTS,
    STREAMS,
    Role,
    consumer_owner,
    fill_with,
    owned_names,
)
from cairn.trust import pki
from cairn.trust.credentials import Identity, Kind, issue
from cairn.trust.nkeyjwt import KeyKind, creds_file_text, new_seed, public_key
from cairn.trust.permissions import inbox_prefix

CREDS = "reader.creds"
KIT_FILE = "kit.yaml"
MAX_NAME = 128
"""A reader's name is its kit's folder name too: well inside any file system's limit."""

README = """# Cairn reader kit: {name}

A read-only identity of federation `{federation}` for an outside system: it may read study
`{study}`'s event stream{data_note}, and nothing else. It cannot publish, make requests, or
see any other study.

- `{creds}`: the credential (NATS user JWT + nkey seed). Secret: keep it mode 0600.
- `ca.pem`: the federation CA. Connect with TLS and verify the server against it.
- `kit.yaml`: the study, its streams ({streams}), the inbox prefix and the consumer names
  this identity may use.
- `context.yaml`: for the `cairn` command: `CAIRN_CONTEXT={context} cairn events tail`.

Any NATS client connects to {url} with:

1. TLS, trusting `ca.pem`;
2. the `.creds` file (JWT + nkey signature of the server's nonce), **and the JWT again as
   the CONNECT token** (the federation's authority reads the token);
3. the inbox prefix `{inbox}`: replies can reach this connection nowhere else.

It reads a stream through JetStream consumers it creates itself, named
`{owner}_0` .. `{owner}_{last}`, with the named create API
`$JS.API.CONSUMER.CREATE.<stream>.<name>[.<filter>]` and `ack_policy: none`. Stream listing
is not allowed: the streams are the ones in `kit.yaml` (`STREAM.INFO` works on each).

The whole guide, with the subjects and the event schemas: docs/events.md of Cairn.
"""


@dataclass(frozen=True)
class ReaderStream:
    """A stream a reader may read, as its kit lists it."""

    name: str
    subjects: tuple[str, ...]
    store: str
    doc: str


@dataclass(frozen=True)
class ReaderKit:
    """A reader's kit on disk.

    Attributes:
        dir: The kit folder.
        record: The reader's record in the provisioning folder (`kits/<name>/kit.yaml`).
        made: False when the reader existed already (nothing was rewritten).
        meta: What `kit.yaml` says.
    """

    dir: Path
    record: Path
    made: bool
    meta: dict[str, Any]

    @property
    def creds(self) -> Path:
        return self.dir / CREDS

    @property
    def context(self) -> Path:
        return self.dir / "context.yaml"


def check_reader_name(name: str) -> str:
    """`name` if it is a reader's name (`name@org`, the org by the name rule).

    Raises:
        InvalidInput: it is not.
    """
    from cairn.spec.federation import ADMIN_NAME

    if not isinstance(name, str) or len(name) > MAX_NAME or not ADMIN_NAME.fullmatch(name):
        raise InvalidInput(f"{name!r} is not a reader name: write it as name@org (e.g. "
                           f"dashboard@org-a, at most {MAX_NAME} characters), the org "
                           "being who answers for the system",
                           field="name")
    check_name(name.split("@", 1)[1], "org")
    return name


def reader_roles(data: bool) -> frozenset[Role]:
    return frozenset({Role.READER, *([Role.DATA_READER] if data else [])})


def reader_streams(study: str, data: bool) -> tuple[ReaderStream, ...]:
    """The streams of `study` the subject table lets a reader (with `data`: a data reader)
    read, with what it may read of each."""
    roles = reader_roles(data)
    tokens = {"study": check_name(study, "study")}
    out: list[ReaderStream] = []
    for row in STREAMS:
        reads = [r for r in row.reads if r.access.role in roles]
        if not reads:
            continue
        whole = any(r.filter is None for r in reads)
        patterns = row.subjects if whole else tuple(r.filter for r in reads if r.filter)
        out.append(ReaderStream(
            name=fill_with(row.name, tokens),
            subjects=tuple(fill_with(s, tokens, wildcards=True) for s in patterns),
            store=row.store, doc=row.doc))
    return tuple(out)


def _yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"cannot read a kit's record: {exc}", file=str(path)) from None
    if not isinstance(data, dict):
        raise InvalidInput("a kit's record is not a mapping", file=str(path))
    return data


def _records(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    kits = root / "kits"
    if not kits.is_dir():
        return []
    return [(p, _yaml(p)) for p in sorted(kits.glob(f"*/{KIT_FILE}"))]


def _revoked(root: Path, name: str) -> bool:
    import json

    path = root / "authority" / "revoked.json"
    try:
        return name in json.loads(path.read_text()).get("names", [])
    except (OSError, ValueError, AttributeError):
        return False


def _federation_defaults(records: list[tuple[Path, dict[str, Any]]]) -> tuple[str, str]:
    """The federation name and NATS URL the folder's other kits name (one provisioning)."""
    for _, meta in records:
        url = meta.get("nats_url")
        if isinstance(url, str) and url:
            return str(meta.get("federation") or "federation"), url
    return "federation", ""


def reader_kit(root: Path, name: str, *, study: str, data: bool = False,
               out: Path | None = None, url: str | None = None) -> ReaderKit:
    """The kit of reader `name` of `study`, made when missing.

    Args:
        root: The provisioning folder (`--out` of `cairn provision`), with the root key.
        name: The reader's name, `name@org`.
        study: The one study it reads.
        data: Whether it may also read the study's data plane and job files.
        out: Where to write the kit (default `root/kits/<name>`; the record stays there).
        url: The federation's NATS URL as the reader reaches it (default: the one the
            folder's other kits name).

    Raises:
        InvalidInput: a bad name or study, or no URL to put in the kit.
        NotFound: `root` is not a provisioning folder.
        Conflict: the name is another identity's, was revoked, or is this reader's with
            another study or data right; or `out` is not empty.
    """
    check_reader_name(name)
    check_name(study, "study")
    root_key = root / "root" / "root.nk"
    for needed in (root_key, root / "ca" / "ca.pem", root / "root" / "root.pub"):
        if not needed.is_file():
            raise NotFound(f"{root} is not a provisioning folder: {needed} is missing (give "
                           "the folder `cairn provision` wrote)", field="root")
    if _revoked(root, name):
        raise Conflict(f"{name} was revoked: a revoked name stays refused, so provision the "
                       "reader under a new name", field="name")
    record_dir = root / "kits" / name
    record = record_dir / KIT_FILE
    records = _records(root)
    if record_dir.exists():
        meta = _yaml(record) if record.is_file() else {}
        if meta.get("kind") != Kind.READER.value:
            raise Conflict(f"{name} is taken by the {meta.get('kind', 'identity')} whose kit "
                           f"is {record_dir}: a reader needs a name of its own (revocation "
                           "is by name)", field="name")
        if meta.get("study") != study or bool(meta.get("data")) != data:
            had = "with data" if meta.get("data") else "events only"
            raise Conflict(f"reader {name} exists already, for study {meta.get('study')} "
                           f"({had}): to change what it reads, revoke it and provision "
                           "another name", field="name")
        return ReaderKit(dir=Path(str(meta.get("kit") or record_dir)), record=record,
                         made=False, meta=meta)
    owner = consumer_owner(Kind.READER.value, name)
    for path, meta in records:
        if meta.get("kind") == Kind.READER.value and meta.get("consumer_owner") == owner:
            raise Conflict(f"{name}'s consumer names ({owner}_*) are those of reader "
                           f"{meta.get('name')} ({path}): choose another name", field="name")
    federation, default_url = _federation_defaults(records)
    url = url or default_url
    if not url:
        raise InvalidInput("no NATS URL for the kit: give --url (the folder has no other "
                           "kit to take it from)", field="url")
    kit = out if out is not None else record_dir
    if kit.exists() and any(kit.iterdir()):
        raise Conflict(f"{kit} is not empty: give a new or empty folder", field="out")
    seed = new_seed(KeyKind.USER)
    identity = Identity(kind=Kind.READER, name=name, org=name.split("@", 1)[1], study=study,
                        data=data)
    jwt = issue(identity, public_key(seed), root_key.read_text(encoding="utf-8").strip())
    meta = _write(root, kit, identity, jwt, seed, url=url, federation=federation)
    if kit.resolve() != record_dir.resolve():
        # The provisioning folder keeps every identity's name (and no secret of this one),
        # so the name is never handed out twice.
        record_dir.mkdir(parents=True, exist_ok=True)
        record.write_text(yaml_text(meta))
    return ReaderKit(dir=kit, record=record, made=True, meta=meta)


def _write(root: Path, kit: Path, identity: Identity, jwt: str, seed: str, *, url: str,
           federation: str) -> dict[str, Any]:
    user_key = public_key(seed)
    owner = consumer_owner(Kind.READER.value, identity.name)
    streams = reader_streams(identity.study, identity.data)
    pki.write_private(kit / CREDS, creds_file_text(jwt, seed))
    pki.write_client_cert(root / "ca", kit, identity.name, jwt, federation=federation)
    (kit / "ca.pem").write_bytes((root / "ca" / "ca.pem").read_bytes())
    (kit / "roots.txt").write_text((root / "root" / "root.pub").read_text())
    meta: dict[str, Any] = {
        "federation": federation, "kind": Kind.READER.value, "name": identity.name,
        "nats_url": url, "study": identity.study, "data": identity.data,
        "kit": str(kit.resolve()),
        "user_key": user_key, "inbox_prefix": inbox_prefix(user_key),
        "consumer_owner": owner, "consumer_names": list(owned_names(owner, EPHEMERAL_SLOTS)),
        "streams": [{"name": s.name, "subjects": list(s.subjects), "store": s.store,
                     "what": s.doc} for s in streams],
    }
    (kit / KIT_FILE).write_text(yaml_text(meta))
    context = {"nats_url": url, "creds": str((kit / CREDS).resolve()),
               "tls_ca": str((kit / "ca.pem").resolve()), "federation": federation,
               "study": identity.study}
    (kit / "context.yaml").write_text(yaml_text(context))
    data_note = " and its data plane and job files" if identity.data else ""
    (kit / "README.md").write_text(README.format(
        name=identity.name, federation=federation, study=identity.study, data_note=data_note,
        creds=CREDS, streams=", ".join(s.name for s in streams),
        context=(kit / "context.yaml").resolve(), url=url, inbox=inbox_prefix(user_key),
        owner=owner, last=EPHEMERAL_SLOTS - 1))
    os.chmod(kit, 0o700)
    return meta
