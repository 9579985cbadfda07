"""NATS subject matching as the server does it, for tests that check patterns without one:
`*` is one token, `>` one or more at the end."""

from __future__ import annotations

from collections.abc import Iterable


def matches(pattern: str, subject: str) -> bool:
    """Whether the NATS `pattern` matches the concrete `subject`."""
    pat, sub = pattern.split("."), subject.split(".")
    for i, token in enumerate(pat):
        if token == ">":
            return len(sub) > i
        if i >= len(sub) or token not in ("*", sub[i]):
            return False
    return len(pat) == len(sub)


def may(allow: Iterable[str], subject: str) -> bool:
    """Whether any pattern of an allow list matches `subject`."""
    return any(matches(p, subject) for p in allow)
