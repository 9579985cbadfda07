"""Cairn's public request/reply contract, derived from the Structs in `cairn.api`.

What `tools/export_schemas.py` writes into `schemas/api/`:

- `envelope.json`: the JSON Schema of a request (`cairn.api.Envelope`: who asks, for which study,
  the reserved signing fields, and the typed request as a tagged union on `type`);
- `reply.json`: the JSON Schema of every answer (`cairn.api.Reply`: `ok`, a tagged `result` or
  an `error`);
- `request.<verb>.json` and `result.<type>.json`: each member of the two unions on its own, for
  clients that generate one type per verb.

`check_schemas.py` holds these to the same compatibility rules as the events.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cairn import api
from tools._schemas import GENERATED_BY, SCHEMA_DIALECT

# Which service answers each scope, and on which subject pattern.
SCOPES: dict[str, tuple[str, str]] = {
    "fed": ("coordinator", "cairn.api.fed.{verb}"),
    "study": ("coordinator", "cairn.api.study.{study}.{verb}"),
    "site": ("snapshotter | launcher", "cairn.api.site.{site}.{verb}"),
    "validation": ("validator", "cairn.api.validation.{verb}"),
}


def _schema(cls: Any) -> dict[str, Any]:
    return {"$schema": SCHEMA_DIALECT, "$comment": GENERATED_BY, **msgspec.json.schema(cls)}


def result_types() -> tuple[type[Any], ...]:
    args: tuple[type[Any], ...] = api.Result.__args__  # type: ignore[attr-defined]
    return args


def api_files() -> dict[str, dict[str, Any]]:
    """Every schema of `schemas/api/`, by path inside `schemas/`."""
    files = {"api/envelope.json": _schema(api.Envelope), "api/reply.json": _schema(api.Reply)}
    for cls in api.REQUEST_TYPES:
        files[f"api/request.{cls.__struct_config__.tag}.json"] = _schema(cls)
    for cls in result_types():
        files[f"api/result.{cls.__struct_config__.tag}.json"] = _schema(cls)
    return files


def api_index() -> dict[str, Any]:
    """The `api` part of `index.json`: per verb, its subject, its server and its schema."""
    out = {}
    for cls in api.REQUEST_TYPES:
        verb = str(cls.__struct_config__.tag)
        server, subject = SCOPES[cls.SCOPE]
        out[verb] = {"type": cls.__name__, "scope": cls.SCOPE,
                     "subject": subject.replace("{verb}", verb), "server": server,
                     "schema": f"api/request.{verb}.json"}
    return out
