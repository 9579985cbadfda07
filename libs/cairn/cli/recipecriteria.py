"""The criteria every `cairn recipe` command takes, spelled as AICR spells them.

`--service eks --accelerator h100 --os ubuntu --intent training --platform kubeflow
--scheduler slurm --nodes 8`, and `--criteria FILE`: a YAML (or JSON) file holding either those
keys as a mapping, or AICR's criteria resource (`kind: RecipeCriteria`, `apiVersion`,
`metadata`, `spec:` with those keys). A flag wins over the file's value for its key.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import msgspec

from cairn.errors import InvalidInput
from cairn.recipes import Criteria
from cairn.recipes.aicr.model import API_VERSIONS
from cairn.recipes.model import CRITERIA_FIELDS
from cairn.yamlfile import convert, parse, read_text

CRITERIA_KEYS: tuple[str, ...] = (*CRITERIA_FIELDS, "nodes")
FILE_PARAM = "criteria_file"


class _Resource(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """AICR's `RecipeCriteria` resource, as its `recipe --criteria FILE` reads it."""

    kind: str
    api_version: str | None = None
    metadata: dict[str, Any] = {}
    spec: Criteria


def criteria_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--criteria FILE` and one flag per criteria key (each None unless given)."""
    for key in reversed(CRITERIA_KEYS):
        func = click.option(
            f"--{key}", key, type=click.IntRange(min=0) if key == "nodes" else str,
            default=None, metavar="N" if key == "nodes" else key.upper(),
            help="Node count (0 = any)." if key == "nodes" else f"Criteria: {key}.",
        )(func)
    return click.option(
        "--criteria", FILE_PARAM, type=click.Path(dir_okay=False, path_type=Path),
        callback=_existing_file, default=None, metavar="FILE",
        help="Criteria from a YAML file: a mapping of the keys above, or AICR's "
             "`kind: RecipeCriteria` with `spec:`; a flag wins over the file.",
    )(func)


def _existing_file(ctx: click.Context, param: click.Parameter, value: Path | None
                   ) -> Path | None:
    if value is None or value.is_file():
        return value
    if "=" in str(value):
        key = str(value).partition("=")[0]
        raise click.BadParameter(f"{str(value)!r}: --criteria takes a FILE; a single key is a "
                                 f"flag of its own, e.g. --{key} ...", ctx, param)
    raise click.BadParameter(f"{value}: no such file", ctx, param)


def load_criteria_file(path: Path) -> dict[str, Any]:
    """The keys `path` sets (a mapping, or a `RecipeCriteria` resource's spec).

    Raises:
        InvalidInput: not YAML, an unknown key or a wrong type (naming file, line, field).
    """
    doc = parse(read_text(path), str(path))
    if isinstance(doc.data, dict) and ("kind" in doc.data or "spec" in doc.data):
        resource = convert(doc, _Resource)
        if resource.kind != "RecipeCriteria":
            raise InvalidInput(f"kind is {resource.kind!r}, expected 'RecipeCriteria'",
                               file=str(path), line=doc.line_of(("kind",)), field="kind")
        if resource.api_version not in API_VERSIONS:
            raise InvalidInput(f"apiVersion {resource.api_version!r} is not AICR's; known: "
                               f"{', '.join(API_VERSIONS)}", file=str(path),
                               line=doc.line_of(("apiVersion",)), field="apiVersion")
        spec = resource.spec
        written = doc.data.get("spec") or {}
    else:
        spec = convert(doc, Criteria)
        written = doc.data or {}
    return {k: getattr(spec, k) for k in CRITERIA_KEYS if k in written}


def given_criteria(values: dict[str, Any]) -> dict[str, Any]:
    """The criteria keys given, from the file and then the flags (a flag wins)."""
    path = values.get(FILE_PARAM)
    given = load_criteria_file(path) if path is not None else {}
    given.update({k: values[k] for k in CRITERIA_KEYS if values.get(k) is not None})
    return given


def query_of(values: dict[str, Any]) -> Criteria:
    """The query the given criteria make ("any" where a key is not given)."""
    return msgspec.convert(given_criteria(values), Criteria)
