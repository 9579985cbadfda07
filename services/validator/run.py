"""One validation run: a site's snapshot and check jobs against one resolved recipe.

    started -> for each phase: run its checks (as jobs), evaluate its constraints, publish
    phase (with CTRF) -> completed (passed only when every phase passed)

Later phases run even when readiness failed: the report then says everything that is wrong
in one go, and GPU checks on a site without GPUs are skipped without a job anyway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import msgspec

from cairn.bus import Bus
from cairn.errors import CairnError
from cairn.events import (
    Event,
    EventEnvelope,
    ValidationCompleted,
    ValidationPhase,
    ValidationStarted,
    event_envelope,
)
from cairn.recipes import Recipe, judge_all_on_nodes, node_readings
from cairn.snapshot import Reading
from cairn.validator import phases, snapshots
from cairn.validator.checkjobs import CheckJobs

log = logging.getLogger("cairn.validator")


class RunEventFields(EventEnvelope):
    """What every event of one validation run starts with."""

    run: str
    site: str
    recipe: str


def _ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


class ValidationRun:
    """Carries out one run and publishes its events; `execute` never raises a CairnError:
    a run that cannot go on ends with `validation.completed` status `error`."""

    def __init__(self, bus: Bus, jobs: CheckJobs, recipe: Recipe, *, site: str, run: str,
                 actor: str | None, fresh: bool = True, source: str = "validator@hub",
                 publish: Callable[[Event], Awaitable[int]] | None = None) -> None:
        self.bus = bus
        self.publish = publish or bus.publish
        """How the run's events are published (the validator's: fenced by its term)."""
        self.jobs = jobs
        self.recipe = recipe
        self.site = site
        self.run = run
        self.actor = actor
        self.fresh = fresh
        self.source = source
        self._started_id: str | None = None

    def _base(self) -> RunEventFields:
        return {**event_envelope(self.source, actor=self.actor, cause=self._started_id),
                "run": self.run, "site": self.site, "recipe": self.recipe.name}

    async def execute(self) -> ValidationCompleted:
        t0 = time.monotonic()
        try:
            return await self._execute(t0)
        except CairnError as exc:
            log.warning("validation %s of %s failed to run: %s", self.run, self.site, exc)
            done = ValidationCompleted(**self._base(), status="error", message=str(exc),
                                       duration_s=round(time.monotonic() - t0, 3))
            await self.publish(done)
            return done

    async def _execute(self, t0: float) -> ValidationCompleted:
        snap, origin = await snapshots.site_snapshot(self.bus, self.site, fresh=self.fresh)
        plan = phases.plan(self.recipe)
        resolved = msgspec.to_builtins(msgspec.structs.replace(self.recipe, provenance=[]))
        resolved.pop("provenance", None)
        started = ValidationStarted(
            **self._base(), snapshot_digest=snap.digest if snap else "",
            snapshot_object=await snapshots.store(self.bus, snap) if snap else "",
            phases=[p.phase for p in plan], resolved=resolved)
        self._started_id = started.id
        await self.publish(started)
        nodes = node_readings(snap)
        emitted: dict[str, Reading] = {}
        statuses: dict[str, str] = {}
        environment = {"site": self.site, "recipe": self.recipe.name, "run": self.run,
                       "snapshot": snap.digest if snap else None, "snapshot_source": origin}
        for step in plan:
            start_ms = _ms()
            runs = [await self.jobs.run_check(check) for check in step.checks]
            for r in runs:
                emitted.update(r.readings)
            results = judge_all_on_nodes(step.constraints, nodes, emitted)
            judged = phases.verdict(step.phase, results, runs)
            doc = phases.phase_report(step.phase, results, runs, start_ms=start_ms,
                                      stop_ms=_ms(), environment=environment)
            counts = doc["results"]["summary"]
            statuses[step.phase] = judged.status
            await self.publish(ValidationPhase(
                **self._base(), phase=step.phase, status=judged.status,
                passed=counts["passed"], failed=counts["failed"], skipped=counts["skipped"],
                ctrf=doc, reasons=list(judged.reasons)))
            log.info("validation %s %s/%s %s: %s", self.run, self.site, self.recipe.name,
                     step.phase, judged.status)
        passed = bool(statuses) and all(s == "passed" for s in statuses.values())
        done = ValidationCompleted(**self._base(), status="passed" if passed else "failed",
                                   phases=statuses, duration_s=round(time.monotonic() - t0, 3),
                                   message="" if statuses else "the recipe has no phases")
        await self.publish(done)
        return done

