"""Checks that run after strict decoding, each error pinned to the file, line and field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from cairn.errors import InvalidInput, InvalidName
from cairn.names import check_name
from cairn.yamlfile import PathKey, YamlDocument, dotted, value_at

T = TypeVar("T")


class Located:
    """Wraps a parsed document so value checks can say where the bad value is."""

    def __init__(self, doc: YamlDocument) -> None:
        self.doc = doc

    def error(
        self, path: PathKey, message: str, cls: type[InvalidInput] = InvalidInput
    ) -> InvalidInput:
        return cls(
            message, file=self.doc.file, line=self.doc.line_of(path), field=dotted(path) or None
        )

    def check(self, path: PathKey, parse: Callable[[Any], T], value: Any) -> T:
        """Run a parser that raises `InvalidInput` and re-raise it located at `path`."""
        try:
            return parse(value)
        except InvalidInput as exc:
            raise self.error(path, exc.message, type(exc)) from None

    def name(self, path: PathKey, value: Any, kind: str) -> str:
        """Apply the name rule (`cairn.names.check_name`), naming the field on failure."""
        try:
            return check_name(value, kind)
        except InvalidName as exc:
            raise self.error(path, exc.message, InvalidName) from None

    def names(self, path: PathKey, values: list[Any], kind: str) -> tuple[str, ...]:
        """A list of names: each obeys the rule, none repeats."""
        seen: list[str] = []
        for index, value in enumerate(values):
            name = self.name((*path, index), value, kind)
            if name in seen:
                raise self.error((*path, index), f"{name!r} is listed twice")
            seen.append(name)
        return tuple(seen)

    def raw(self, path: PathKey) -> Any:
        """The parsed value at `path` (None when absent): to see what the user wrote."""
        return value_at(self.doc.data, path)
