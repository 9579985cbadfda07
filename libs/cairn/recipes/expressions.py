"""Constraint expressions: the `value` of a constraint, parsed once, tested against a reading.

Grammar (whitespace around operators is optional):

    >= X | <= X | > X | < X | == X | != X   compare (AICR's operators)
    X                                       bare value: exact match (AICR)
    ~ REGEX                                 regular expression, searched (Cairn)
    in [a, b] | not in [a, b]               set membership (Cairn)
    >=6.8,<7                                comma-joined range: every part must hold (Cairn)
    6.8.x                                   version wildcard: same leading components (Cairn)
    ^1.32                                   caret range: >=1.32,<2 (Cairn)

The operators are a closed set: any other value that starts with `=`, `<`, `>` or `!`
(`=> 5.10`, `=< 2`) is an error when the recipe loads; quote a value that really starts so.

How a comparison reads its operands: a number reading (int or float) is compared as a number,
and the expected side may carry a binary size suffix (`1GiB`); a string reading is compared as
a version (see `cairn.recipes.versions`). A list reading (e.g. `Container.docker.runtimes`)
is tested element-wise: `X`/`==` and `in` hold when some element matches, `!=` and `not in`
when none does, `~` when some element matches; ordering a list is an error.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cairn.recipes.versions import caret_upper, compare_versions, parse_version

Reading = str | int | float | bool | list[str]
"""One measured value, as a snapshot or a check reports it."""

_COMPARE = re.compile(r"^(>=|<=|==|!=|>|<)\s*(.+)$", re.S)
_SET = re.compile(r"^(not\s+in|in)\s*\[(.*)\]$", re.S)
# A value that starts like an operator but is none of the known ones (`=> 5.10`, `=< 2`,
# `>> 1`, `= 3`) is a typo, not an exact match that silently never holds; quote it to mean it.
_NOT_AN_OPERATOR = re.compile(r"^[=<>!]")
_OPERATOR_HEAD = re.compile(r"^[=<>!][=<>!\s]*")
_KNOWN_OPERATORS = ">=, <=, >, <, ==, !=, ~, in [...], not in [...], ^"
_WILDCARD = re.compile(r"^[vV]?\d+(?:\.\d+)*\.[xX*]$")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|TiB|PiB)$")
_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
_ORDER: dict[str, Callable[[int], bool]] = {
    ">=": lambda c: c >= 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    "<": lambda c: c < 0,
}


class ExpressionError(ValueError):
    """The expression is malformed, or cannot be applied to this reading."""


@dataclass(frozen=True)
class Expression:
    """A parsed constraint value: `holds(reading)` is its whole meaning."""

    text: str
    test: Callable[[Reading], bool]

    def holds(self, reading: Reading) -> bool:
        """True when `reading` satisfies the expression.

        Raises:
            ExpressionError: the reading cannot be compared this way (e.g. `latest >= 1.2`).
        """
        return self.test(reading)


@functools.lru_cache(maxsize=8192)
def parse_expression(text: str) -> Expression:
    """Parse a constraint value once; the result is cached, recipes repeat the same values.

    Raises:
        ExpressionError: the text is empty or malformed (bad regex, unclosed set, ...).
    """
    source = text.strip()
    if not source:
        raise ExpressionError("empty expression")
    return Expression(text, _compile(source))


def _compile(src: str) -> Callable[[Reading], bool]:
    if src.startswith("~"):
        return _regex(src[1:].strip())
    set_match = _SET.match(src)
    if set_match:
        items = _set_items(set_match.group(2))
        negate = set_match.group(1) != "in"
        return lambda r: _in_set(r, items) != negate
    if "," in src:
        parts = [_compile(part.strip()) for part in src.split(",")]
        if any(not part for part in src.split(",")):
            raise ExpressionError(f"empty part in range {src!r}")
        return lambda r: all(part(r) for part in parts)
    if src.startswith("^"):
        low = src[1:].strip()
        _need_version(low)
        high = caret_upper(low)
        return lambda r: _order(r, ">=", low) and _order(r, "<", high)
    if _WILDCARD.match(src):
        prefix = src[:-2]
        return lambda r: _wildcard(r, prefix)
    cmp_match = _COMPARE.match(src)
    if cmp_match:
        op, raw = cmp_match.group(1), cmp_match.group(2).strip()
        _refuse_operator_like(raw, src)
        expected = _unquote(raw)
        if op == "==":
            return lambda r: _equal(r, expected)
        if op == "!=":
            return lambda r: not _equal(r, expected)
        return lambda r: _order(r, op, expected)
    _refuse_operator_like(src, src)
    expected = _unquote(src)
    return lambda r: _equal(r, expected)


def _refuse_operator_like(value: str, src: str) -> None:
    if _NOT_AN_OPERATOR.match(value):
        head = _OPERATOR_HEAD.match(src)
        op = head.group(0).strip() if head else value[:2]
        raise ExpressionError(f"unknown operator {op!r} in {src!r} (known: {_KNOWN_OPERATORS})")


def _regex(pattern: str) -> Callable[[Reading], bool]:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ExpressionError(f"bad regular expression {pattern!r}: {exc}") from None
    return lambda r: any(compiled.search(s) for s in _strings(r))


def _set_items(body: str) -> frozenset[str]:
    items = frozenset(_unquote(item.strip()) for item in body.split(",") if item.strip())
    if not items:
        raise ExpressionError("empty set")
    return items


def _in_set(reading: Reading, items: frozenset[str]) -> bool:
    return any(s in items for s in _strings(reading))


def _equal(reading: Reading, expected: str) -> bool:
    if isinstance(reading, list):
        return expected in reading
    if isinstance(reading, bool):
        return _text(reading) == expected.lower()
    if isinstance(reading, int | float):
        number = _number(expected)
        return number is not None and float(reading) == number
    return reading == expected


def _order(reading: Reading, op: str, expected: str) -> bool:
    if isinstance(reading, list):
        raise ExpressionError(f"cannot order a list with {op}")
    if isinstance(reading, bool):
        raise ExpressionError(f"cannot order a boolean with {op}")
    if isinstance(reading, int | float):
        number = _number(expected)
        if number is None:
            raise ExpressionError(f"{expected!r} is not a number")
        return _ORDER[op]((reading > number) - (reading < number))
    try:
        return _ORDER[op](compare_versions(reading, expected))
    except ValueError as exc:
        raise ExpressionError(f"cannot compare {reading!r} {op} {expected!r}: {exc}") from None


def _wildcard(reading: Reading, prefix: str) -> bool:
    if not isinstance(reading, str):
        raise ExpressionError("a version wildcard needs a version string")
    want, have = parse_version(prefix), parse_version(reading)
    if want is None or have is None:
        raise ExpressionError(f"{reading!r} is not a version")
    return have[0][: len(want[0])] == want[0]


def _need_version(text: str) -> None:
    if parse_version(text) is None:
        raise ExpressionError(f"{text!r} is not a version")


def _number(text: str) -> float | None:
    size = _SIZE.match(text)
    if size:
        return float(size.group(1)) * _UNITS[size.group(2)]
    try:
        return float(text)
    except ValueError:
        return None


def _strings(reading: Reading) -> Sequence[str]:
    return reading if isinstance(reading, list) else [_text(reading)]


def _text(reading: str | int | float | bool) -> str:
    if isinstance(reading, bool):
        return "true" if reading else "false"
    if isinstance(reading, float) and reading.is_integer():
        return str(int(reading))
    return str(reading)


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text
