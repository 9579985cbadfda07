"""Version strings as sites really report them, compared by their numeric components.

Real readings carry prefixes and suffixes: `v25.10.1`, `6.8.0-1024-aws`, `1.32.4-eks-abc`,
`580.105.08`, `24.04`, `v0.1.0-alpha.12`. A version is a leading `v`, dot-separated numbers
(the core), then an optional suffix after `-` or `+`. Cores are compared numerically with
missing components read as 0 (so `6.8` equals `6.8.0`). A suffix only breaks a tie, and only
when both sides have one: `6.8.0-1024-aws >= 6.8` must hold, so a kernel's build suffix can
never make it look older than the release it is built from.
"""

from __future__ import annotations

import functools
import re

_CORE = re.compile(r"^[vV]?(\d+(?:\.\d+)*)(?:\.?([-+~].*|[A-Za-z].*))?$")
_CHUNK = re.compile(r"\d+|[^\d.\-+_]+")

Version = tuple[tuple[int, ...], str]


@functools.lru_cache(maxsize=4096)
def parse_version(text: str) -> Version | None:
    """Split `text` into (numeric core, suffix), or None when it does not start like a version.

    `6.8.0-1024-aws` -> ((6, 8, 0), "1024-aws"); `v25.10.1` -> ((25, 10, 1), "");
    `12.8` -> ((12, 8), ""); `latest` -> None.
    """
    match = _CORE.match(text.strip())
    if match is None:
        return None
    core = tuple(int(part) for part in match.group(1).split("."))
    suffix = (match.group(2) or "").lstrip("-+~")
    return core, suffix


def compare_versions(left: str, right: str) -> int:
    """Return -1, 0 or 1 as `left` is older than, equal to or newer than `right`.

    Raises:
        ValueError: when either side does not parse as a version.
    """
    a, b = parse_version(left), parse_version(right)
    if a is None or b is None:
        bad = left if a is None else right
        raise ValueError(f"{bad!r} is not a version")
    width = max(len(a[0]), len(b[0]))
    core_a = a[0] + (0,) * (width - len(a[0]))
    core_b = b[0] + (0,) * (width - len(b[0]))
    if core_a != core_b:
        return -1 if core_a < core_b else 1
    if a[1] and b[1]:
        return _compare_suffix(a[1], b[1])
    return 0


def _compare_suffix(a: str, b: str) -> int:
    """Natural order: `alpha.8 < alpha.12`, `1024-aws > 999-aws`."""
    ka, kb = _natural_key(a), _natural_key(b)
    if ka == kb:
        return 0
    return -1 if ka < kb else 1


def _natural_key(text: str) -> tuple[tuple[int, int, str], ...]:
    # Numbers sort before words so the tuple comparison never mixes int and str.
    return tuple(
        (0, int(chunk), "") if chunk.isdigit() else (1, 0, chunk.lower())
        for chunk in _CHUNK.findall(text)
    )


def caret_upper(text: str) -> str:
    """Upper bound (exclusive) of a `^X.Y` range, as npm and Cargo read it.

    `^1.32` -> `2`; `^0.5` -> `0.6`; `^0.0.3` -> `0.0.4`.
    """
    parsed = parse_version(text)
    if parsed is None:
        raise ValueError(f"{text!r} is not a version")
    core = list(parsed[0])
    for index, part in enumerate(core):
        if part != 0 or index == len(core) - 1:
            return ".".join(str(p) for p in [*core[:index], part + 1])
    return ".".join(str(p) for p in core)  # pragma: no cover - loop always returns
