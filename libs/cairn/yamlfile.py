"""Strict decoding of operator-written YAML: every error names the file, line and field.

Operator files (job specs, site configs, study_runtime.yaml, recipes, federation.yaml) are
decoded into msgspec Structs declared with `forbid_unknown_fields=True`, so a typo is an error,
not a silently ignored key.

Every file is read at bounded cost, before anything is built from it: its size, the number of
nodes it expands to (aliases counted as often as they are used, so a "billion laughs" file is
refused after reading its few hundred events) and its nesting depth have limits, set by
`CAIRN_YAML_MAX_BYTES`, `CAIRN_YAML_MAX_NODES` and `CAIRN_YAML_MAX_DEPTH` (docs/limits.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from cairn import files
from cairn.errors import InvalidInput

T = TypeVar("T")
PathKey = tuple[str | int, ...]

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_NODES = 100_000
DEFAULT_MAX_DEPTH = 64


@dataclass(frozen=True, kw_only=True)
class YamlLimits:
    """What one operator file may cost to read."""

    max_bytes: int = DEFAULT_MAX_BYTES
    """Size of the file in bytes."""
    max_nodes: int = DEFAULT_MAX_NODES
    """Scalars and collections, each alias counted as the nodes it stands for."""
    max_depth: int = DEFAULT_MAX_DEPTH
    """Collections nested in collections."""

    @classmethod
    def from_env(cls) -> YamlLimits:
        """The limits in force: the defaults, overridden by `CAIRN_YAML_MAX_*`."""
        return cls(max_bytes=_env_int("CAIRN_YAML_MAX_BYTES", DEFAULT_MAX_BYTES),
                   max_nodes=_env_int("CAIRN_YAML_MAX_NODES", DEFAULT_MAX_NODES),
                   max_depth=_env_int("CAIRN_YAML_MAX_DEPTH", DEFAULT_MAX_DEPTH))


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidInput(f"must be a positive whole number, not {raw!r}", field=name)
    return value


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


def parse(text: str, file: str = "<input>", *, limits: YamlLimits | None = None) -> YamlDocument:
    """Parse YAML text, rejecting duplicate keys, keeping line numbers.

    Raises:
        InvalidInput: the text is not YAML, or breaks one of `limits` (from the environment
            when not given), naming the file and the line.
    """
    limits = limits or YamlLimits.from_env()
    if len(text) > limits.max_bytes or len(text.encode("utf-8", "surrogatepass")) > \
            limits.max_bytes:
        raise _too_large(file, limits)
    try:
        _check_cost(text, file, limits)
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


def _check_cost(text: str, file: str, limits: YamlLimits) -> None:
    """Refuse text that would expand past `limits`, from its parser events alone.

    Events stream without building anything, and an anchor's expanded size is known when its
    node ends, so a file full of aliases is costed in one linear pass over what it says.
    """
    expanded: dict[str, int] = {}
    # Open collections: (anchor, node count when it started).
    stack: list[tuple[str | None, int]] = []
    total = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            anchor = event.anchor or ""
            if any(open_anchor == anchor for open_anchor, _ in stack):
                raise InvalidInput(f"alias *{anchor} refers to a collection that holds it",
                                   file=file, line=_line_of(event))
            total += expanded.get(anchor, 1)
        elif isinstance(event, yaml.ScalarEvent):
            total += 1
            if event.anchor:
                expanded[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= limits.max_depth:
                raise InvalidInput(
                    f"nested deeper than the limit of {limits.max_depth} "
                    "(CAIRN_YAML_MAX_DEPTH)", file=file, line=_line_of(event))
            stack.append((event.anchor, total))
            total += 1
        elif isinstance(event, yaml.CollectionEndEvent) and stack:
            closed, started = stack.pop()
            if closed:
                expanded[closed] = total - started
        if total > limits.max_nodes:
            raise InvalidInput(
                f"expands to more than the limit of {limits.max_nodes} nodes "
                "(CAIRN_YAML_MAX_NODES; an alias counts the nodes it stands for)",
                file=file, line=_line_of(event))


def _line_of(event: yaml.Event) -> int | None:
    mark = event.start_mark
    return mark.line + 1 if mark is not None else None


def _too_large(file: str, limits: YamlLimits) -> InvalidInput:
    return files.too_large(file, limits.max_bytes, "CAIRN_YAML_MAX_BYTES")


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
    except ValueError as exc:
        # An integer of more digits than Python converts, a date out of range, ...
        raise InvalidInput(f"not a usable value: {exc}", file=file,
                           line=node.start_mark.line + 1) from None
    finally:
        _SCALARS.constructed_objects.clear()  # its per-node cache would only grow


def read_text(path: str | Path, *, shown: str | None = None,
              limits: YamlLimits | None = None) -> str:
    """An operator file's text, read at bounded cost (`cairn.files`).

    Raises:
        InvalidInput: naming the file (as `shown` when given): it is missing, unreadable,
            not a regular file (a FIFO, a device), larger than `limits.max_bytes` (read no
            further than that), or not UTF-8 (naming the byte offset of the first bad byte).
    """
    limits = limits or YamlLimits.from_env()
    return files.read_text(path, limit=limits.max_bytes, shown=shown,
                           limit_name="CAIRN_YAML_MAX_BYTES")


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
