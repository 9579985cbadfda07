"""`--set params.KEY=VALUE` at submit: one of the job's params, changed for this run.

The spec's `params:` is the schema: only a param it declares may be set, and the new value
must be of the declared value's type (an integer where it holds an integer; a number, integer
or not, where it holds a float; `true`/`false` where a boolean; any text where a string; a
list or a mapping, in YAML flow style, where it holds one; anything JSON where it holds
null). VALUE is read as YAML (`5`, `0.1`, `true`, `[1, 2]`). The result is the job's
`params`, recorded in its `job.submitted` event like any other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec
import yaml

from cairn.errors import InvalidInput
from cairn.spec.job import JobSpec
from cairn.yamlfile import parse

PREFIX = "params."
MAX_VALUE_CHARS = 64 * 1024
"""The longest VALUE one `--set` may give (the whole request must fit one bus message)."""


def apply_sets(spec: JobSpec, sets: Sequence[str], *, file: str = "job.yaml") -> JobSpec:
    """`spec` with each `params.KEY=VALUE` of `sets` applied, in order.

    Raises:
        InvalidInput: a malformed assignment, a param the spec does not declare, or a value
            of another type (the field is `--set params.KEY`).
    """
    params: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(spec.params))
    for item in sets:
        key, value = _split(item)
        path = key[len(PREFIX):].split(".")
        field = f"--set {key}"
        parent = params
        for depth, part in enumerate(path[:-1]):
            inner = parent.get(part)
            if not isinstance(inner, dict):
                declared = ".".join(path[: depth + 1])
                raise InvalidInput(f"{file} declares no mapping params.{declared}", field=field)
            parent = inner
        last = path[-1]
        if last not in parent:
            known = ", ".join(sorted(parent)) or "none"
            raise InvalidInput(f"{file} declares no param {'.'.join(path)!r} (its params here: "
                               f"{known}); add it under params: to make it settable",
                               field=field)
        parent[last] = _typed(value, parent[last], field, f"{file} declares {last}: "
                              f"{_shown(parent[last])}")
    return msgspec.structs.replace(spec, params=params)


def _split(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key.startswith(PREFIX) or any(not p for p in key[len(PREFIX):].split(".")):
        raise InvalidInput(f"{item!r}: write params.KEY=VALUE, e.g. params.rounds=5 (only the "
                           "job's params can be set)", field="--set")
    if len(value) > MAX_VALUE_CHARS:
        raise InvalidInput(f"the value is longer than {MAX_VALUE_CHARS} characters",
                           field=f"--set {key}")
    return key, value


def _typed(text: str, declared: Any, field: str, why: str) -> Any:
    """`text` as a value of the declared value's type."""
    if isinstance(declared, str):
        return text
    # Read with the bounded reader of operator files: an alias bomb in VALUE is refused too.
    value: Any = parse(text, field).data if text.strip() else None
    kind = _kind(declared)
    ok = {
        "a boolean": isinstance(value, bool),
        "an integer": isinstance(value, int) and not isinstance(value, bool),
        "a number": isinstance(value, int | float) and not isinstance(value, bool),
        "a list": isinstance(value, list),
        "a mapping": isinstance(value, dict),
        "any JSON value": True,
    }[kind]
    if not ok:
        raise InvalidInput(f"{text!r} is not {kind} ({why})", field=field)
    if kind == "a number":
        value = float(value)
    _check_json(value, field, text)
    return value


def _kind(declared: Any) -> str:
    if isinstance(declared, bool):
        return "a boolean"
    if isinstance(declared, int):
        return "an integer"
    if isinstance(declared, float):
        return "a number"
    if isinstance(declared, list):
        return "a list"
    if isinstance(declared, dict):
        return "a mapping"
    return "any JSON value"


def _check_json(value: Any, field: str, text: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"{text!r}: key {key!r} is not a string", field=field)
            _check_json(item, field, text)
    elif isinstance(value, list):
        for item in value:
            _check_json(item, field, text)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{text!r} is not a JSON number", field=field)
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise InvalidInput(f"{text!r} is not a JSON value (quote dates and times)", field=field)


def _shown(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=200).strip().removesuffix(
        "\n...").removesuffix("...").strip()
