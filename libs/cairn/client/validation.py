"""Running a validation from a client: ask the validator, follow the run's events, collect
the result (and write the files an evidence bundle holds)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import yaml

from cairn import subjects
from cairn.api import ValidationAccepted
from cairn.bus import Bus, objects, replay
from cairn.errors import InvalidInput, Timeout
from cairn.events import (
    FEDERATION_DECODER,
    ValidationCompleted,
    ValidationPhase,
    ValidationStarted,
)

if TYPE_CHECKING:
    from cairn.client.core import Client

CLOCK_SKEW_S = 60.0
"""Events are read from this long before the request, so a validator whose clock is behind
ours is still followed (events are matched by run id, so older ones never mix in)."""
POLL_S = 0.25


class PhaseResult(msgspec.Struct, kw_only=True):
    status: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    reasons: list[str] = []
    ctrf: dict[str, Any] | None = None


class ValidationResult(msgspec.Struct, kw_only=True):
    """What `-o json|yaml` prints (stable fields)."""

    run: str
    site: str
    recipe: str
    status: str
    duration_s: float = 0.0
    message: str = ""
    snapshot_digest: str = ""
    phases: dict[str, PhaseResult] = {}


async def follow(bus: Bus, site: str, recipe: str, run_id: str, since: datetime,
                 timeout: float) -> list[Any]:
    """The run's events, in order, until `validation.completed`.

    Raises:
        Timeout: the run did not complete within `timeout` seconds.
    """
    stream = subjects.FEDERATION_STREAM.name
    filters = [subjects.validation_all(site, recipe)]
    found: list[Any] = []
    last = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        start: dict[str, Any] = {"start_seq": last + 1} if last else {"start_time": since}
        async for item in replay(bus, stream, FEDERATION_DECODER, filters=filters, **start):
            last = max(last, item.seq)
            event = item.event
            if getattr(event, "run", None) == run_id:
                found.append(event)
                if isinstance(event, ValidationCompleted):
                    return found
        await asyncio.sleep(POLL_S)
    raise Timeout(f"validation {run_id} did not complete within {timeout:g}s")


def result_of(events: list[Any]) -> ValidationResult:
    done = next(e for e in events if isinstance(e, ValidationCompleted))
    started = next((e for e in events if isinstance(e, ValidationStarted)), None)
    phases = {e.phase: PhaseResult(status=e.status, passed=e.passed, failed=e.failed,
                                   skipped=e.skipped, reasons=list(e.reasons), ctrf=e.ctrf)
              for e in events if isinstance(e, ValidationPhase)}
    return ValidationResult(run=done.run, site=done.site, recipe=done.recipe, status=done.status,
                            duration_s=done.duration_s, message=done.message,
                            snapshot_digest=started.snapshot_digest if started else "",
                            phases=phases)


async def write_out(bus: Bus, out: Path, result: ValidationResult, events: list[Any]) -> None:
    """DIR/result.json, DIR/ctrf/<phase>.json, DIR/snapshot.json, DIR/recipe.resolved.yaml:
    the files an evidence bundle holds."""
    try:
        (out / "ctrf").mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_bytes(msgspec.json.format(msgspec.json.encode(result)))
        for phase, item in result.phases.items():
            (out / "ctrf" / f"{phase}.json").write_text(json.dumps(item.ctrf, indent=2) + "\n")
        started = next((e for e in events if isinstance(e, ValidationStarted)), None)
        if started is not None and started.resolved is not None:
            (out / "recipe.resolved.yaml").write_text(
                yaml.safe_dump(started.resolved, sort_keys=False))
        if started is not None and started.snapshot_object:
            store = await objects(bus, subjects.OBJ_SNAPSHOTS)
            (out / "snapshot.json").write_bytes(await store.get(started.snapshot_object))
    except OSError as exc:
        raise InvalidInput(f"cannot write: {exc.strerror or exc}", file=str(out)) from None


async def run_validation(client: Client, site: str, recipe: str, *, fresh: bool = True,
                         timeout: float = 3600.0, out: Path | None = None) -> ValidationResult:
    """Validate `site` against `recipe` through the validator and wait for the result
    (`Client.validate` is the same)."""
    return await client.validate(site, recipe, fresh=fresh, timeout=timeout, out=out)


async def validate(bus: Bus, accepted: ValidationAccepted, since: datetime, *, timeout: float,
                   out: Path | None) -> ValidationResult:
    """Follow an accepted run to its end; write `out` when given."""
    events = await follow(bus, accepted.site, accepted.recipe, accepted.run, since, timeout)
    result = result_of(events)
    if out is not None:
        await write_out(bus, out, result, events)
    return result
