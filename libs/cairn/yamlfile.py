"""Strict decoding of operator-written YAML: every error names the file, line and field.

Operator files (job specs, site configs, study_runtime.yaml, recipes, federation.yaml) are
decoded into msgspec Structs declared with `forbid_unknown_fields=True`, so a typo is an error,
not a silently ignored key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from cairn.errors import InvalidInput

T = TypeVar("T")
PathKey = tuple[str | int, ...]

_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


class YamlDocument:
    """Parsed YAML plus the line of every key, for error messages."""

    def __init__(self, data: Any, lines: dict[PathKey, int], file: str) -> None:
        self.data = data
        self.lines = lines
        self.file = file

    def line_of(self, path: PathKey) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)


# libyaml's parser when present: the pure-Python one costs a third of a second on a catalog.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SCALARS = yaml.constructor.SafeConstructor()


def parse(text: str, file: str = "<input>") -> YamlDocument:
    """Parse YAML text, rejecting duplicate keys, keeping line numbers."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise InvalidInput(f"not valid YAML: {exc.problem}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise InvalidInput(f"not valid YAML: {exc}", file=file) from None
    lines: dict[PathKey, int] = {}
    if node is None:
        return YamlDocument(None, lines, file)
    lines[()] = node.start_mark.line + 1
    data = _build(node, (), lines, file)
    return YamlDocument(data, lines, file)


def _build(node: yaml.Node, path: PathKey, lines: dict[PathKey, int], file: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _build(key_node, path, lines, file)
            if isinstance(key, (list, dict)):
                raise InvalidInput("a mapping key must be a scalar", file=file,
                                   line=key_node.start_mark.line + 1)
            if key in out:
                raise InvalidInput(f"duplicate key {key!r}", file=file,
                                   line=key_node.start_mark.line + 1,
                                   field=dotted((*path, str(key))))
            sub = (*path, str(key))
            lines[sub] = key_node.start_mark.line + 1
            out[key] = _build(value_node, sub, lines, file)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            sub = (*path, index)
            lines[sub] = item.start_mark.line + 1
            items.append(_build(item, sub, lines, file))
        return items
    try:
        return _SCALARS.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        raise InvalidInput(f"not valid YAML: {exc.problem}", file=file,
                           line=mark.line + 1 if mark is not None else None) from None
    finally:
        _SCALARS.constructed_objects.clear()  # its per-node cache would only grow


def read_text(path: str | Path) -> str:
    """An operator file's text; a missing or unreadable file is `InvalidInput` naming it."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput("file not found", file=str(p)) from None
    except OSError as exc:
        raise InvalidInput(f"cannot read: {exc.strerror}", file=str(p)) from None


def load(path: str | Path, type_: type[T]) -> T:
    """Read and strictly decode one YAML file into `type_`."""
    return loads(read_text(path), type_, file=str(path))


def loads(text: str, type_: type[T], *, file: str = "<input>") -> T:
    doc = parse(text, file)
    if doc.data is None:
        raise InvalidInput("the file is empty", file=file)
    return convert(doc, type_)


def convert(doc: YamlDocument, type_: type[T], data: Any = None,
            prefix: PathKey = ()) -> T:
    """Convert parsed data into `type_`, turning msgspec's errors into `InvalidInput`."""
    value = doc.data if data is None else data
    try:
        return msgspec.convert(value, type_, strict=False)
    except msgspec.ValidationError as exc:
        raise located_error(doc, str(exc), value, prefix) from None


def located_error(doc: YamlDocument, message: str, data: Any,
                  prefix: PathKey = ()) -> InvalidInput:
    """Build an error naming file, line and field from a msgspec message."""
    match = _AT.match(message)
    msg = match.group("msg") if match else message
    raw_path = (match.group("path") if match else "") or ""
    path = _resolve(raw_path, data, msg)
    unknown = re.search(r"unknown field `([^`]+)`", msg)
    missing = re.search(r"missing required field `([^`]+)`", msg)
    field_path = path
    if unknown:
        field_path = (*path, unknown.group(1))
        msg = f"unknown field {unknown.group(1)!r}"
    elif missing:
        field_path = (*path, missing.group(1))
        msg = f"missing required field {missing.group(1)!r}"
    full = (*prefix, *field_path)
    line = doc.line_of(full)
    return InvalidInput(_lower_first(msg), file=doc.file, line=line,
                        field=dotted(full) or None)


def _resolve(raw: str, data: Any, msg: str) -> PathKey:
    """Turn msgspec's `$.a[0].b` path into keys, guessing dict keys that it elides as `[...]`."""
    tokens: list[str | int | None] = []
    for m in _TOKEN.finditer(raw):
        if m.group(1) is not None:
            tokens.append(m.group(1))
        elif m.group(2) == "...":
            tokens.append(None)
        else:
            tokens.append(int(m.group(2)))
    return tuple(_walk(tokens, data, msg))


def _walk(tokens: list[str | int | None], data: Any, msg: str) -> list[str | int]:
    if not tokens:
        return []
    head, rest = tokens[0], tokens[1:]
    if head is None and isinstance(data, dict):
        unknown = re.search(r"unknown field `([^`]+)`", msg)
        for key, value in data.items():
            sub = _walk(rest, value, msg)
            target = value_at(value, sub)
            if len(sub) == len(rest) and (not unknown or (isinstance(target, dict)
                                                          and unknown.group(1) in target)):
                return [str(key), *sub]
        return ["..."]
    if head is None:
        return ["..."]
    nxt = data.get(head) if isinstance(data, dict) else (
        data[head] if isinstance(data, list) and isinstance(head, int) and head < len(data)
        else None)
    return [head, *_walk(rest, nxt, msg)]


def value_at(data: Any, path: Sequence[str | int]) -> Any:
    """The parsed value at `path`, or None when absent."""
    for key in path:
        if isinstance(data, Mapping):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and key < len(data):
            data = data[key]
        else:
            return None
    return data


def dotted(path: PathKey) -> str:
    """`("roles", "client", "sites", 1)` -> `roles.client.sites[1]`, as errors name fields."""
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text else text
