"""Check `schemas/` against the code: `.venv/bin/python tools/check_schemas.py [--schemas DIR]`.

The committed folder is the baseline, the Structs are the candidate. Exit codes:

- 0: identical;
- 1: INCOMPATIBLE: an event type (tag) is gone, a field is gone, a field's type changed, or a
  field without a default appeared or lost its default; one line per problem, naming the tag
  and the field (a breaking change is a new tag: `job.submitted.v2`);
- 1: compatible but different: `schemas/ is stale: run `make schemas``, after one line per
  file that differs.

`--against BASELINE` checks the code against what subscribers really have instead: a folder
(`schemas/baseline/`, the committed copy of the last release's schemas, which CI checks) or a
git revision whose committed `schemas/` is taken (a release tag, the branch a change goes
into). Re-exporting `schemas/` after a breaking change cannot hide it from that check. Only
incompatibilities fail it (exit 1); new event types and fields are what releases add. An
incompatibility passes only when this checkout's major version (pyproject.toml) is higher
than the baseline's release (its README's `(x.y.z)`, or pyproject.toml at the revision):
docs/compatibility.md. Exit 2 when the folder, the revision or its `schemas/` cannot be read.

The HTTP API's OpenAPI document (`openapi.json`) is held to the same rule by
`tools/_openapi.py`: an operation, parameter, documented status or response field that callers
of the baseline rely on must stay, unless the contract's major version changed.

Types are compared structurally: annotations (defaults, docs, titles) never break readers,
and a nested Struct is compared field by field, so a renamed class is not a type change.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script: make `tools.*` importable

from tools._compat_rules import (  # noqa: E402
    break_permitted,
    project_version,
    read_git_folder,
    verdict,
    version_at,
)
from tools._openapi import check_openapi  # noqa: E402
from tools.export_schemas import generate, is_generated  # noqa: E402

_ANNOTATIONS = frozenset({"default", "description", "title", "examples", "$comment"})
Defs = dict[str, Any]


def read_tree(folder: Path) -> dict[str, str]:
    """The generated kinds of file under `folder`, by relative path (others are not ours)."""
    if not folder.is_dir():
        return {}
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and is_generated(rel):
            out[rel] = path.read_text(encoding="utf-8")
    return out


def _events(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Every Struct schema held to the compatibility rules: events by tag, and the request/reply
    contract as `api/<name>`."""
    out = {
        rel[len("events/") : -len(".json")]: json.loads(text)
        for rel, text in files.items()
        if rel.startswith("events/")
    }
    out.update({
        rel[: -len(".json")]: json.loads(text)
        for rel, text in files.items()
        if rel.startswith(("api/", "data/"))
    })
    return out


def _def_name(schema: dict[str, Any]) -> str:
    return str(schema["$ref"]).rsplit("/", 1)[-1]


def _is_struct(defs: Defs, name: str) -> bool:
    return "properties" in defs.get(name, {})


def _shape(schema: Any, defs: Defs) -> Any:
    """What a reader relies on: the schema without annotations, each Struct as `struct`."""
    if isinstance(schema, list):
        return [_shape(s, defs) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        name = _def_name(schema)
        # Structs are compared field by field (see `_struct_refs`); enums and the like inline.
        return "struct" if _is_struct(defs, name) else _shape(defs.get(name, {}), defs)
    return {k: _shape(v, defs) for k, v in sorted(schema.items()) if k not in _ANNOTATIONS}


def _struct_refs(schema: Any, defs: Defs) -> Iterator[str]:
    """The Structs a field holds, in a fixed order (pairs up when two shapes are equal)."""
    if isinstance(schema, list):
        for s in schema:
            yield from _struct_refs(s, defs)
    elif isinstance(schema, dict):
        if "$ref" in schema:
            if _is_struct(defs, _def_name(schema)):
                yield _def_name(schema)
            return
        for key in sorted(schema):
            if key not in _ANNOTATIONS:
                yield from _struct_refs(schema[key], defs)


def _describe(shape: Any) -> str:
    if isinstance(shape, dict) and set(shape) == {"type"}:
        return str(shape["type"])
    return json.dumps(shape, sort_keys=True, separators=(",", ":"))


def _widened_union(before: Any, after: Any) -> list[tuple[str, str]] | None:
    """The (old, new) Struct of each old tag, when `after` is the tagged union `before` with
    variants added (on the same tag property); else None."""
    try:
        bdisc, ndisc = before["discriminator"], after["discriminator"]
        bmap, nmap = bdisc["mapping"], ndisc["mapping"]
    except (KeyError, TypeError):
        return None
    if bdisc.get("propertyName") != ndisc.get("propertyName") or not set(bmap) < set(nmap):
        return None
    return [(bmap[t].rsplit("/", 1)[-1], nmap[t].rsplit("/", 1)[-1]) for t in sorted(bmap)]


def _compare_struct(
    tag: str,
    prefix: str,
    base: Defs,
    bdefs: Defs,
    new: Defs,
    ndefs: Defs,
    seen: set[tuple[str, str]],
) -> list[str]:
    problems = []
    bprops, nprops = base.get("properties", {}), new.get("properties", {})
    breq, nreq = set(base.get("required", [])), set(new.get("required", []))
    for name, bschema in bprops.items():
        field = prefix + name
        if name not in nprops:
            problems.append(f"INCOMPATIBLE {tag}: field {field!r} removed")
            continue
        nschema = nprops[name]
        widened = _widened_union(bschema, nschema)
        if widened is not None:
            # A tagged union that gained variants and kept each old one: what a release adds
            # (a reader of the baseline never sees the new tags from its old writers).
            for bref, nref in widened:
                if (bref, nref) not in seen:
                    seen.add((bref, nref))
                    problems += _compare_struct(
                        tag, field + ".", bdefs[bref], bdefs, ndefs[nref], ndefs, seen
                    )
            continue
        before, after = _shape(bschema, bdefs), _shape(nschema, ndefs)
        if before != after:
            problems.append(
                f"INCOMPATIBLE {tag}: field {field!r} changed type from "
                f"{_describe(before)} to {_describe(after)}"
            )
            continue
        if name in nreq and name not in breq:
            problems.append(
                f"INCOMPATIBLE {tag}: field {field!r} became required "
                "(old writers omit it: give it a default)"
            )
        for bref, nref in zip(
            _struct_refs(bschema, bdefs), _struct_refs(nschema, ndefs), strict=True
        ):
            if (bref, nref) not in seen:  # recursive Structs end here
                seen.add((bref, nref))
                problems += _compare_struct(
                    tag, field + ".", bdefs[bref], bdefs, ndefs[nref], ndefs, seen
                )
    for name in nprops:
        if name not in bprops and name in nreq:
            problems.append(
                f"INCOMPATIBLE {tag}: new field {prefix + name!r} is required "
                "(old writers omit it: give it a default)"
            )
    return problems


def incompatibilities(baseline: dict[str, str], candidate: dict[str, str]) -> list[str]:
    """What in `candidate` breaks a reader or writer of `baseline`, one line per problem."""
    base, new = _events(baseline), _events(candidate)
    problems = []
    for tag in sorted(base):
        if tag not in new:
            problems.append(
                f"INCOMPATIBLE {tag}: event type removed "
                f"(a breaking change is a new tag, e.g. {tag}.v2)"
            )
            continue
        bdefs, ndefs = base[tag].get("$defs", {}), new[tag].get("$defs", {})
        bname, nname = _def_name(base[tag]), _def_name(new[tag])
        problems += _compare_struct(
            tag, "", bdefs[bname], bdefs, ndefs[nname], ndefs, {(bname, nname)}
        )
    # The HTTP API's contract, by the same rule: what callers of the baseline rely on stays.
    return problems + check_openapi(baseline, candidate)


def value_incompatibilities(label: str, baseline: dict[str, Any],
                            candidate: dict[str, Any]) -> list[str]:
    """What in the schema `candidate` breaks a reader of `baseline`, by the rules above, for a
    schema of any value: a Struct, a list or map of them, a union (the `-o json` output of a
    command, a file's format). One line per problem, naming `label` and the field."""
    bdefs, ndefs = baseline.get("$defs", {}), candidate.get("$defs", {})
    if "$ref" in baseline and "$ref" in candidate and _is_struct(bdefs, _def_name(baseline)) \
            and _is_struct(ndefs, _def_name(candidate)):
        bname, nname = _def_name(baseline), _def_name(candidate)
        return _compare_struct(label, "", bdefs[bname], bdefs, ndefs[nname], ndefs,
                               {(bname, nname)})
    # The value itself, without the definitions it refers to (compared Struct by Struct).
    btop = {k: v for k, v in baseline.items() if k not in ("$defs", "$schema")}
    ntop = {k: v for k, v in candidate.items() if k not in ("$defs", "$schema")}
    before, after = _shape(btop, bdefs), _shape(ntop, ndefs)
    if before != after:
        return [f"INCOMPATIBLE {label}: changed type from {_describe(before)} to "
                f"{_describe(after)}"]
    problems, seen = [], set()
    for bref, nref in zip(_struct_refs(btop, bdefs), _struct_refs(ntop, ndefs), strict=True):
        if (bref, nref) not in seen:
            seen.add((bref, nref))
            problems += _compare_struct(label, "", bdefs[bref], bdefs, ndefs[nref], ndefs, seen)
    return problems


def check(folder: Path, label: str) -> tuple[int, list[str]]:
    """(exit code, lines to print) for the committed `folder` against the code."""
    baseline, candidate = read_tree(folder), generate()
    if baseline == candidate:
        return 0, [f"{label} is up to date ({len(candidate)} files)"]
    problems = incompatibilities(baseline, candidate)
    if problems:
        return 1, problems
    lines = []
    for rel in sorted(set(baseline) | set(candidate)):
        if rel not in baseline:
            lines.append(f"{label}{rel}: new")
        elif rel not in candidate:
            lines.append(f"{label}{rel}: no longer generated")
        elif baseline[rel] != candidate[rel]:
            lines.append(f"{label}{rel}: differs")
    lines.append(f"{label} is stale: run `make schemas`")
    return 1, lines


def read_revision(repo: Path, rev: str) -> dict[str, str]:
    """The generated files of `schemas/` as committed at `rev` in the git repository `repo`.

    Raises:
        LookupError: not a repository, an unknown revision, or no `schemas/` there.
    """
    return read_git_folder(repo, rev, "schemas", is_generated)


BASELINE = REPO / "schemas" / "baseline"
"""The schemas of the last release, committed (`make schemas-baseline` at a release)."""


def read_baseline(folder: Path) -> dict[str, str]:
    """The generated files of a baseline folder (a copy of a release's `schemas/`).

    Raises:
        LookupError: it holds no event schemas.
    """
    files = read_tree(folder)
    if not any(rel.startswith("events/") for rel in files):
        raise LookupError(f"{folder} holds no events/*.json")
    return files


def check_against(repo: Path, rev: str) -> tuple[int, list[str]]:
    """(exit code, lines to print) for the code against a baseline folder, or against
    `schemas/` at the git revision `rev`."""
    folder = Path(rev)
    label = f"{rev.rstrip('/')}/" if folder.is_dir() else f"schemas/ at {rev}"
    try:
        baseline = read_baseline(folder) if folder.is_dir() else read_revision(repo, rev)
    except (LookupError, OSError, UnicodeDecodeError) as exc:
        return 2, [f"cannot read {label}: {exc}"]
    try:
        problems = incompatibilities(baseline, generate())
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return 2, [f"cannot read {label}: a schema is malformed ({type(exc).__name__}: {exc})"]
    if problems:
        version = baseline_version(folder) if folder.is_dir() else version_at(repo, rev)
        # A baseline that does not say its release permits nothing.
        if version is not None and break_permitted(version, project_version()):
            return verdict(problems, version, project_version(), label)
        return 1, problems
    return 0, [f"compatible with {label} ({len(_events(baseline))} event types)"]


_RELEASE = re.compile(r"\((\d+\.\d+\.\d+[^)]*)\)")


def baseline_version(folder: Path) -> str | None:
    """The release a baseline folder was cut from: `(x.y.z)` on its README's first line
    (`make schemas-baseline RELEASE=x.y.z` writes it), None where it does not say."""
    try:
        first = (folder / "README.md").read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    found = _RELEASE.search(first)
    return found.group(1) if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--schemas",
        default=None,
        help="the committed folder to check (default: schemas/ of this checkout)",
    )
    parser.add_argument(
        "--against",
        metavar="BASELINE",
        default=None,
        help="check compatibility with a baseline instead: a folder (schemas/baseline, the "
        "last release's) or a git revision whose committed schemas/ is taken",
    )
    parser.add_argument(
        "--repo",
        default=str(REPO),
        help="the git repository that --against reads (default: this checkout)",
    )
    args = parser.parse_args(argv)
    if args.against is not None:
        code, lines = check_against(Path(args.repo), args.against)
    else:
        folder = Path(args.schemas) if args.schemas else REPO / "schemas"
        label = (args.schemas or "schemas").rstrip("/") + "/"
        code, lines = check(folder, label)
    for line in lines:
        print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
