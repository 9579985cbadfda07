"""The context file: how commands find the bus (`.cairn/context.yaml` or `$CAIRN_CONTEXT`).

`cairn up` writes it; every command reads it; `CAIRN_NATS_URL` overrides its URL, and
`--study`/`CAIRN_STUDY` and `--actor`/`CAIRN_ACTOR` override its defaults.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import msgspec
import yaml

from cairn import files, yamlfile
from cairn.errors import InvalidInput, Unavailable

DEFAULT_PATH = Path(".cairn") / "context.yaml"


class Context(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Where the federation is and how to reach it.

    Attributes:
        nats_url: The federation's NATS URL.
        study: The default study of a session.
        actor: The default actor (a secure federation records the request's signer).
        creds: The startup kit's credentials file (identity; signs requests).
        tls_ca: The federation CA that the server is checked against.
        dir: `cairn up`'s working directory (configs, stores, logs).
        up_pid: The pid of the `cairn up` that owns the federation (`cairn down` stops it).
        api_url: The HTTP API's URL (`cairn api token`, `docs/api.md`), where one runs.
    """

    nats_url: str
    creds: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    federation: str | None = None
    study: str | None = None
    actor: str | None = None
    dir: str | None = None
    up_pid: int | None = None
    hub: str | None = None
    sites: list[str] = []
    api_url: str | None = None


def tls_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The TLS context for a CA, client certificate and key; None when none is given."""
    if not (ca or cert):
        return None
    # Read bounded here: the ssl module would read a FIFO or /dev/zero for ever.
    cadata = files.read_text(ca, limit=files.PEM_FILE_BYTES) if ca else None
    if cadata is not None and not cadata.strip():
        # An empty cadata would make ssl trust the system's CAs instead.
        raise InvalidInput("empty: no CA certificate in it", file=ca)
    try:
        ctx = ssl.create_default_context(cadata=cadata)
    except ssl.SSLError as exc:
        raise InvalidInput(f"not a PEM CA certificate ({exc.reason or exc})", file=ca) from None
    if cert:
        for path in (cert, key):
            if path:
                files.check_regular(path, limit=files.PEM_FILE_BYTES)
        try:
            ctx.load_cert_chain(cert, key)
        except ssl.SSLError as exc:
            raise InvalidInput(f"not a PEM certificate and key ({exc.reason or exc})",
                               file=cert) from None
    return ctx


def context_path() -> Path:
    return Path(os.environ.get("CAIRN_CONTEXT") or DEFAULT_PATH)


def load(path: Path | None = None, *, required: bool = True) -> Context | None:
    """Read the context; `CAIRN_NATS_URL` alone is enough when there is no file."""
    p = path or context_path()
    env_url = os.environ.get("CAIRN_NATS_URL")
    ctx: Context | None = None
    if p.is_file():
        ctx = yamlfile.load(p, Context)
    if env_url:
        ctx = msgspec.structs.replace(ctx, nats_url=env_url) if ctx else Context(nats_url=env_url)
    # A credential and CA given by the environment win too (a kit used without a file).
    if ctx is not None and (os.environ.get("CAIRN_CREDS") or os.environ.get("CAIRN_TLS_CA")):
        ctx = msgspec.structs.replace(ctx, creds=os.environ.get("CAIRN_CREDS") or ctx.creds,
                                      tls_ca=os.environ.get("CAIRN_TLS_CA") or ctx.tls_ca)
    if ctx is None and required:
        raise Unavailable(f"no federation found: {p} does not exist and CAIRN_NATS_URL is not "
                          "set (start one with `cairn up`)")
    return ctx


def save(ctx: Context, path: Path | None = None) -> Path:
    p = path or context_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    data = {k: v for k, v in msgspec.to_builtins(ctx).items() if v not in (None, [])}
    tmp = p.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    tmp.replace(p)
    return p
