"""The HTTP API's OpenAPI 3.1 document (`schemas/openapi.json`) and its compatibility rules.

The document is generated from the Litestar application itself (`cairn.httpapi.app`), so it
is exactly what the service serves at `/openapi/openapi.json`. A change breaks callers of the
baseline when an operation (path and method) is gone; a parameter is gone, retyped, moved
(query, path, header) or newly required; a documented status is gone; or a field of a
response body is gone or retyped (a nested object compared field by field, so a renamed
component is not a change). New operations, optional parameters, statuses and response
fields are what releases add. The contract's major version (`info.version`) may break it:
the check then says so instead of failing.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

OPENAPI = "openapi.json"
Doc = dict[str, Any]
_ANNOTATIONS = frozenset({"default", "description", "title", "examples", "summary",
                          "$comment", "deprecated", "operationId"})


REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "build" / "openapi-cache"


def _inputs_digest() -> str:
    """What the document is made from: every source file of the library and the API service,
    and Litestar's version (so a cached document is never one another code would make)."""
    from importlib import metadata

    digest = hashlib.sha256(metadata.version("litestar").encode())
    for folder in (REPO / "libs" / "cairn", REPO / "services" / "httpapi"):
        for path in sorted(folder.rglob("*.py")):
            digest.update(path.relative_to(REPO).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def openapi_document() -> Doc:
    """The document as the service serves it (no federation needed to build it).

    Building it imports Litestar (most of a second); `tools/check_schemas.py` runs often, so
    the document is kept under build/ by the digest of everything it is made from."""
    key = _inputs_digest()
    cached = CACHE / f"{key}.json"
    if cached.is_file():
        doc: Doc = json.loads(cached.read_text(encoding="utf-8"))
        return doc
    doc = _build()
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(doc), encoding="utf-8")
        partial.replace(cached)  # atomic: a concurrent reader sees all of it or none
        for stale in CACHE.glob("*.json"):
            if stale != cached:
                stale.unlink(missing_ok=True)  # made from code that is gone
    except OSError:
        pass  # a read-only checkout: build it every time
    return doc


def _build() -> Doc:
    from cairn.httpapi.app import build_app
    from cairn.httpapi.context import ApiContext

    app = build_app(ApiContext(bus=None, feeds=None, facts=None, recipes=None,  # type: ignore[arg-type]
                               roots=None))
    import msgspec

    # Through JSON: plain values only (the document holds Structs and enums).
    doc: Doc = msgspec.json.decode(msgspec.json.encode(app.openapi_schema.to_schema()))
    return doc


def _major(doc: Doc) -> str:
    return str(doc.get("info", {}).get("version", "0")).split(".")[0]


def _resolve(schema: Any, doc: Doc, seen: frozenset[str] = frozenset()) -> Any:
    """`schema` with its `$ref`s replaced by what they name (recursion cut at a repeat)."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            if name in seen:
                return {"$ref": "(recursive)"}
            target = doc.get("components", {}).get("schemas", {}).get(name, {})
            return _resolve(target, doc, seen | {name})
        return {k: _resolve(v, doc, seen) for k, v in schema.items()
                if k not in _ANNOTATIONS}
    if isinstance(schema, list):
        return [_resolve(v, doc, seen) for v in schema]
    return schema


def _kind(schema: Any) -> str:
    """A short description of a schema's type, to compare and to print."""
    if not isinstance(schema, dict):
        return repr(schema)
    if "properties" in schema:
        return "object"
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return " | ".join(sorted(_kind(s) for s in schema[key]))
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_kind(schema.get('items', {}))}"
    return str(kind) if not isinstance(kind, list) else " | ".join(sorted(map(str, kind)))


def _compare_body(where: str, old: Any, new: Any) -> list[str]:
    """What in `new` (a response body) breaks a reader of `old`."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return [] if old == new else [f"INCOMPATIBLE {where}: type changed"]
    if "properties" in old:
        if "properties" not in new:
            return [f"INCOMPATIBLE {where}: was an object, now {_kind(new)}"]
        problems = []
        for name, field in old["properties"].items():
            if name not in new["properties"]:
                problems.append(f"INCOMPATIBLE {where}.{name}: field removed")
                continue
            problems += _compare_body(f"{where}.{name}", field, new["properties"][name])
        return problems
    if _kind(old) != _kind(new):
        return [f"INCOMPATIBLE {where}: type changed from {_kind(old)} to {_kind(new)}"]
    if old.get("type") == "array":
        return _compare_body(f"{where}[]", old.get("items", {}), new.get("items", {}))
    return []


def _params(op: Doc, doc: Doc) -> dict[tuple[str, str], Doc]:
    return {(p["in"], p["name"]): p for p in (_resolve(p, doc) for p in op.get("parameters", []))}


def _body_schema(response: Doc, doc: Doc) -> Any:
    content = _resolve(response, doc).get("content", {})
    for media in ("application/json", *content):
        if media in content:
            return content[media].get("schema", {})
    return {}


def openapi_incompatibilities(base: Doc, new: Doc) -> list[str]:
    """What in `new` breaks a caller of `base`, one line per problem."""
    problems: list[str] = []
    for path, ops in base.get("paths", {}).items():
        for method, op in ops.items():
            where = f"{method.upper()} {path}"
            new_op = new.get("paths", {}).get(path, {}).get(method)
            if new_op is None:
                problems.append(f"INCOMPATIBLE {where}: operation removed")
                continue
            old_params, new_params = _params(op, base), _params(new_op, new)
            for key, param in old_params.items():
                if key not in new_params:
                    problems.append(f"INCOMPATIBLE {where}: {key[0]} parameter {key[1]} "
                                    "removed")
                elif _kind(param.get("schema")) != _kind(new_params[key].get("schema")):
                    problems.append(f"INCOMPATIBLE {where}: {key[0]} parameter {key[1]} "
                                    "changed type")
            for key, param in new_params.items():
                if key not in old_params and param.get("required"):
                    problems.append(f"INCOMPATIBLE {where}: new required {key[0]} parameter "
                                    f"{key[1]} (old callers do not send it)")
            new_responses = new_op.get("responses", {})
            for status, response in op.get("responses", {}).items():
                if status not in new_responses:
                    problems.append(f"INCOMPATIBLE {where}: response {status} removed")
                    continue
                problems += _compare_body(f"{where} {status}", _body_schema(response, base),
                                          _body_schema(new_responses[status], new))
    return problems


def check_openapi(baseline: dict[str, str], candidate: dict[str, str]) -> list[str]:
    """The incompatibilities of the candidate's `openapi.json` with the baseline's (none
    when the baseline has none, or when the candidate's major version is a new one)."""
    if OPENAPI not in baseline:
        return []
    if OPENAPI not in candidate:
        return [f"INCOMPATIBLE {OPENAPI}: the HTTP API's contract is gone"]
    base, new = json.loads(baseline[OPENAPI]), json.loads(candidate[OPENAPI])
    if _major(new) != _major(base):
        return []
    problems = openapi_incompatibilities(base, new)
    if problems:
        problems.append(f"(a breaking change to the HTTP API needs a new major version: "
                        f"info.version is {new.get('info', {}).get('version')}, "
                        f"cairn.httpapi.app.API_VERSION)")
    return problems
