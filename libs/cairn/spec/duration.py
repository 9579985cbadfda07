"""Durations for timeouts and ages: `90s`, `30m`, `1h`, `2h30m`, `7d` -> whole seconds."""

from __future__ import annotations

import re

from cairn.errors import InvalidInput

_DURATION = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")
_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
MAX_DURATION_S = 366 * 86400
"""The longest timeout or age (docs/limits.md): a year; anything longer is a slip."""


def parse_duration(value: object) -> int:
    """`2h30m` -> 9000 seconds; a bare integer is seconds.

    Raises:
        InvalidInput: not a duration, or zero.
    """
    if isinstance(value, bool):
        raise InvalidInput(f"{value!r} is not a duration (examples: '90s', '30m', '2h30m')")
    if isinstance(value, int):
        seconds = value
    # The length cap keeps int() away from numbers too long to convert.
    elif isinstance(value, str) and len(value) <= 64 and (
            match := _DURATION.fullmatch(value.strip())) and value.strip():
        seconds = sum(int(match.group(unit) or 0) * size for unit, size in _UNITS)
    else:
        raise InvalidInput(f"{_shown(value)} is not a duration (examples: '90s', '30m', '2h30m', "
                           "'7d')")
    if seconds <= 0:
        raise InvalidInput(f"{value!r}: a duration must be longer than zero")
    if seconds > MAX_DURATION_S:
        raise InvalidInput(
            f"{_shown(value)} is longer than the limit of {format_duration(MAX_DURATION_S)}")
    return seconds


def _shown(value: object) -> str:
    """`value` as an error shows it: a hostile 5,000-digit number is cut short."""
    if isinstance(value, int) and value.bit_length() > 128:
        return "a number that long"  # repr() itself refuses ints past 4300 digits
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def format_duration(seconds: int) -> str:
    """9000 -> '2h30m', 0 -> '0s'."""
    if seconds <= 0:
        return "0s"
    out = ""
    for unit, size in _UNITS:
        if seconds >= size:
            out += f"{seconds // size}{unit}"
            seconds %= size
    return out
