"""Durations for timeouts and ages: `90s`, `30m`, `1h`, `2h30m`, `7d` -> whole seconds."""

from __future__ import annotations

import re

from cairn.errors import InvalidInput

_DURATION = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")
_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def parse_duration(value: object) -> int:
    """`2h30m` -> 9000 seconds; a bare integer is seconds.

    Raises:
        InvalidInput: not a duration, or zero.
    """
    if isinstance(value, bool):
        raise InvalidInput(f"{value!r} is not a duration (examples: '90s', '30m', '2h30m')")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value.strip())) and value.strip():
        seconds = sum(int(match.group(unit) or 0) * size for unit, size in _UNITS)
    else:
        raise InvalidInput(f"{value!r} is not a duration (examples: '90s', '30m', '2h30m', '7d')")
    if seconds <= 0:
        raise InvalidInput(f"{value!r}: a duration must be longer than zero")
    return seconds


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
