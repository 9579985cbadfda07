"""From a finished validation run's events to what the signer signs."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from cairn import subjects
from cairn.bus import Bus, objects, replay
from cairn.errors import CairnError
from cairn.events import FEDERATION_DECODER, ValidationCompleted, ValidationPhase, ValidationStarted
from cairn.evidence.bundle import ValidationOutcome
from cairn.snapshot import Snapshot, decode

log = logging.getLogger("cairn.signer")
LOOKBACK_MARGIN = timedelta(minutes=5)
SIGNED_STATUSES = ("passed", "failed")
"""A run that ended in `error` was not carried out: there is nothing to attest."""


def outcome_of(events: Sequence[Any], snapshot: Snapshot | None) -> ValidationOutcome | None:
    """The outcome of a run from its events (None when the run was never started)."""
    done = next((e for e in events if isinstance(e, ValidationCompleted)), None)
    started = next((e for e in events if isinstance(e, ValidationStarted)), None)
    if done is None or started is None or started.resolved is None:
        return None
    phases = [e for e in events if isinstance(e, ValidationPhase)]
    return ValidationOutcome(
        site=done.site, recipe=done.recipe, resolved=started.resolved, snapshot=snapshot,
        ctrf={p.phase: p.ctrf or {} for p in phases},
        phases={p.phase: p.status for p in phases}, passed=done.status == "passed",
        validated_at=done.at, run=done.run)


async def run_events(bus: Bus, done: ValidationCompleted) -> list[Any]:
    """Every event of the run `done` completes, in order."""
    since = done.at - timedelta(seconds=done.duration_s) - LOOKBACK_MARGIN
    found: list[Any] = []
    async for item in replay(bus, subjects.FEDERATION_STREAM.name, FEDERATION_DECODER,
                             filters=[subjects.validation_all(done.site, done.recipe)],
                             start_time=since):
        if item.event is not None and getattr(item.event, "run", None) == done.run:
            found.append(item.event)
    return found


async def judged_snapshot(bus: Bus, events: Sequence[Any]) -> Snapshot | None:
    """The snapshot the run was judged on, from the `snapshots` store."""
    started = next((e for e in events if isinstance(e, ValidationStarted)), None)
    if started is None or not started.snapshot_object:
        return None
    try:
        data = await (await objects(bus, subjects.OBJ_SNAPSHOTS)).get(started.snapshot_object)
        return decode(data, source=started.snapshot_object)
    except CairnError as exc:
        log.warning("snapshot %s of run %s unreadable: %s", started.snapshot_object,
                    started.run, exc)
        return None
