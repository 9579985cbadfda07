"""The validator: validates a site against a recipe on request (`cairn validate`).

A request on `cairn.api.validation.run` (`{actor, args: {site, recipe, fresh?}}`) is checked
at once (names, recipe, site) and answered with the run id; the run itself goes on in the
background and reports as events on `cairn.validation.<site>.<recipe>.<verb>`, which is what
`cairn validate` follows. Runs of one site are serialised: the reserved study `validation`
allows a site one check job at a time.

Check jobs are submitted to the coordinator as the validator's own actor, a project admin of
the federation: `-O actor=NAME`, else the first project_admin of the `federation.seeded`
event. Options: `actor`, `catalog` (recipe catalog directory; default as `cairn recipe`).

Behind a lease (`cairn.runtime.standby`), the validator is fenced like the coordinator
(`cairn.bus.Fence`): at take-over it begins its term (`validation.term` on
`cairn.validation.term`) before it looks at any run, and JetStream stores its run events only
while that term is the last begun. A validator that was frozen mid-run and wakes up after a
standby took over (and ended its runs as cut off) is refused by the server: a run never
ends twice.

A run does not survive its validator: on start, each run this validator started within the
last `ORPHAN_LOOKBACK` and never completed (it was killed mid-run) is completed with status
`error` and a message saying so, so whoever follows it gets an answer instead of a timeout.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from cairn import api, subjects
from cairn.bus import Fence, replay
from cairn.client import Client
from cairn.errors import NotFound, Unavailable
from cairn.events import (
    FEDERATION_DECODER,
    Event,
    ValidationCompleted,
    ValidationStarted,
    ValidationTerm,
    event_envelope,
    now,
)
from cairn.names import check_name, new_ulid
from cairn.recipes import Catalog, load_catalog, resolve
from cairn.runtime.seed import project_admin
from cairn.runtime.service import Runtime, ServiceConfig
from cairn.spec.runtime import VALIDATION_STUDY
from cairn.subjects import ApiAddress
from cairn.validator.checkjobs import CheckJobs
from cairn.validator.run import ValidationRun

log = logging.getLogger("cairn.validator")
ORPHAN_LOOKBACK = timedelta(days=1)


class ValidatorService:
    name: ClassVar[str] = "validator"

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        options: dict[str, str] = dict(config.options or {})
        self.actor: str | None = options.get("actor") or None
        self._catalog_dir = options.get("catalog") or None
        self._catalog: Catalog | None = None
        self.locks: dict[str, asyncio.Lock] = {}
        self.runs: dict[str, asyncio.Task[Any]] = {}
        self.done = 0
        self._ready = False
        self.rt: Runtime | None = None
        self.fence: Fence | None = None

    @property
    def catalog(self) -> Catalog:
        """The recipe catalog, read at the first run that needs it: parsing every recipe
        file is most of a validator's start, and most starts run no validation.

        Raises:
            InvalidInput: a malformed catalog (naming the file), told to that run's caller.
        """
        if self._catalog is None:
            self._catalog = load_catalog(self._catalog_dir)
        return self._catalog

    def ready(self) -> bool:
        return self._ready

    def health(self) -> dict[str, Any]:
        return {"running": sum(1 for t in self.runs.values() if not t.done()),
                "completed": self.done, "actor": self.actor}

    @property
    def source(self) -> str:
        assert self.rt is not None
        return f"validator@{self.rt.site}"

    async def start(self, rt: Runtime) -> None:
        self.rt = rt
        await rt.bus.ensure_federation()
        lease = rt.leases.get(self.name)
        if lease is not None:
            self.fence = Fence(rt.bus, lease, self._term)
            # Before any run is looked at: from here on an earlier validator is refused.
            await self.fence.begin(subjects.FEDERATION_STREAM.name, subjects.validation_any())
        await self._close_orphans()
        await rt.serve_api(subjects.api_validation("run"), self._on_run, queue="validator")
        self._ready = True

    async def publish(self, event: Event) -> int:
        """Publish one of the validator's events: with its lease's term, and stored only
        while that term is the last begun (`cairn.bus.Fence`).

        Raises:
            LeaseLost: this instance is not (or no longer) the active validator.
        """
        assert self.rt is not None
        headers = self.rt.fence(self.name)
        if self.fence is None:
            return await self.rt.bus.publish(event, headers=headers)
        return await self.fence.publish(event, subjects.FEDERATION_STREAM.name,
                                        headers=headers)

    def _term(self, stream: str) -> Event:
        """The event that begins this validator's term (see `Fence`)."""
        assert self.fence is not None
        lease = self.fence.lease
        return ValidationTerm(**event_envelope(self.source, id=f"validation.term.{lease.term}"),
                              service=self.name, term=lease.term, holder=lease.record.holder)

    async def _close_orphans(self) -> None:
        assert self.rt is not None
        started: dict[str, ValidationStarted] = {}
        finished: set[str] = set()
        async for item in replay(self.rt.bus, subjects.FEDERATION_STREAM.name, FEDERATION_DECODER,
                                 filters=[subjects.validation_any()],
                                 start_time=datetime.now(UTC) - ORPHAN_LOOKBACK):
            event = item.event
            if isinstance(event, ValidationStarted) and event.source == self.source:
                started[event.run] = event
            elif isinstance(event, ValidationCompleted):
                finished.add(event.run)
        for run, begun in started.items():
            if run in finished:
                continue
            log.warning("validation %s of %s was cut off by a restart: ending it as error",
                        run, begun.site)
            # A fixed id: a second restart before this lands publishes it once.
            await self.publish(ValidationCompleted(
                id=f"{run}.cut-off", at=now(), source=self.source, actor=begun.actor,
                cause=begun.id, run=run, site=begun.site, recipe=begun.recipe, status="error",
                message="the validator restarted during this run, which cannot resume (its "
                        "check jobs may still finish on their own): run it again"))

    async def stop(self) -> None:
        self._ready = False
        for task in self.runs.values():
            task.cancel()
        await asyncio.gather(*self.runs.values(), return_exceptions=True)

    async def _own_actor(self) -> str:
        """The validator's actor, found once: the seed's first project admin."""
        if self.actor:
            return self.actor
        assert self.rt is not None
        admin = await project_admin(self.rt.bus)
        if admin is not None:
            self.actor = admin
            return admin
        raise Unavailable("the validator has no actor: start it with -O actor=NAME (a project "
                          "admin) or let the coordinator seed the federation first")

    async def _on_run(self, envelope: api.Envelope, address: ApiAddress) -> api.Result:
        assert self.rt is not None
        match envelope.request:
            case api.ValidationRun() as req:
                pass
            case other:
                raise NotFound(f"the validator does not serve {api.verb_of(other)!r}")
        site = check_name(req.site, "site")
        recipe = resolve(self.catalog, check_name(req.recipe, "recipe"))
        actor = await self._own_actor()
        client = Client(self.rt.bus, study=VALIDATION_STUDY, actor=actor)
        info = await client.site(site)  # NotFound when the site is not in `validation`
        if not info.online:
            raise Unavailable(f"site {site} is offline (no recent heartbeat)")
        run_id = f"v-{new_ulid().lower()}"
        gpus = info.capacity.gpus if info.capacity is not None else 0
        jobs = CheckJobs(client, self.catalog, site=site, site_gpus=gpus, run=run_id)
        run = ValidationRun(self.rt.bus, jobs, recipe, site=site, run=run_id,
                            actor=envelope.actor, fresh=req.fresh,
                            source=self.source, publish=self.publish)
        self.runs[run_id] = self.rt.spawn(self._serialised(site, run), f"validation:{run_id}")
        return api.ValidationAccepted(run=run_id, site=site, recipe=recipe.name, actor=actor)

    async def _serialised(self, site: str, run: ValidationRun) -> None:
        async with self.locks.setdefault(site, asyncio.Lock()):
            await run.execute()
        self.done += 1
        self.runs.pop(run.run, None)

