"""What a check reports: one `CheckReport` per rank, printed as one line on stdout.

A check worker prints `CAIRN-CHECK {json}`; the validator reads it back from the worker's log
through the site's launcher. A line on stdout needs no SDK and no bus connection from the
worker, so a check runs unchanged in any image that has Cairn installed, on any backend that
captures stdout.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

MARKER = "CAIRN-CHECK"

Status = Literal["passed", "failed", "skipped", "error"]
Value = int | float | str | bool


class CheckReport(msgspec.Struct, kw_only=True, frozen=True):
    """One rank's result of one check."""

    check: str
    status: Status
    """passed, failed, skipped (could not run here: says why) or error (the check broke)."""
    message: str = ""
    readings: dict[str, Value] = {}
    """Readings the check emits (names from `emits` in recipes/checks.yaml)."""
    details: dict[str, Any] = {}
    rank: int = 0
    started_at: float = 0.0
    """Unix time the check process started (gang-start compares these across ranks)."""
    duration_s: float = 0.0


_DECODER = msgspec.json.Decoder(CheckReport)


def format_line(report: CheckReport) -> str:
    """The one stdout line that carries `report`."""
    return f"{MARKER} {msgspec.json.encode(report).decode()}"


def parse_lines(text: str) -> list[CheckReport]:
    """Every report line in a worker log (other output and malformed lines are ignored:
    a check's own tools may print anything)."""
    out: list[CheckReport] = []
    for line in text.splitlines():
        head, _, body = line.partition(" ")
        if head != MARKER:
            continue
        try:
            out.append(_DECODER.decode(body))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return out


def option(params: dict[str, Any], key: str, default: Any) -> Any:
    """A check parameter: the recipe's `with:` first, then the validator's own params."""
    with_ = params.get("with") or {}
    if isinstance(with_, dict) and key in with_:
        return with_[key]
    return params.get(key, default)
