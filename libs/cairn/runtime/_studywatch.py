"""Every study's membership as the coordinator wrote it, followed live (for the leaf anchors).

What proves a study and its sites is the coordinator's own events on a study's admin
subjects (`cairn.study.<study>.admin.<verb>`): only the coordinator's identity may publish
there, and each stored event is checked against its subject (`cairn.subjects.misplaced`)
before it is folded. Nothing a site says about itself counts.

The study's stream is the one source, read in its order: a live message on a study's admin
subjects only says that there is more to read, from the last sequence folded on. Studies
named in `federation.yaml` are known from the start, as the authority and the coordinator
seed them. A study created later is found in the list of study streams (the authority makes
a study's stream when the coordinator creates it), looked at again whenever this connection
is renewed (the authority renews it when a study is created: the hub's rights name every
study) and at least every `RESCAN_S`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cairn import subjects
from cairn.bus import Bus, decode_event, replay
from cairn.events import STUDY_DECODER, StudyAdmin, StudyCreated
from cairn.names import is_name
from cairn.spec.federation import Federation
from cairn.spec.runtime import VALIDATION_STUDY
from cairn.state import study as study_state
from cairn.state.study import StudyState

log = logging.getLogger("cairn.runtime.leafanchor")

RESCAN_S = 2.0
"""At most this long between looks for study streams not yet followed."""
STORED_WAIT_S = 5.0
"""How long a live admin event may take to show in its stream (it is stored as it is sent:
normally a few milliseconds)."""


def seeded(fed: Federation) -> dict[str, StudyState]:
    """The studies of the federation file (and the check-job study of every site), as the
    coordinator seeds them."""
    studies = {name: (list(m.sites), list(m.admins)) for name, m in fed.studies.items()}
    studies.setdefault(VALIDATION_STUDY, ([s.name for s in fed.sites],
                                          [a.name for a in fed.admins
                                           if a.role == "project_admin"]))
    out: dict[str, StudyState] = {}
    for name, (sites, admins) in studies.items():
        orgs = {a.name: a.org for a in fed.admins}
        created = StudyCreated(id=f"seed-{name}", at=datetime(1970, 1, 1, tzinfo=UTC),
                               study=name, source=f"coordinator@{fed.hub}", name=name,
                               sites=sites, admins=[StudyAdmin(name=a, org=orgs.get(a, "?"))
                                                    for a in admins])
        state = study_state.apply(None, created)
        assert state is not None
        out[name] = state
    return out


@dataclass
class StudyWatch:
    """Folds every study's admin events in stream order; `changed` is called after a study
    appeared or its sites changed.

    Args:
        bus: A connection as the hub (it may read every study's admin subjects and streams).
        studies: The known studies to start from (`seeded`).
        changed: Called with no arguments after each change.
    """

    bus: Bus
    studies: dict[str, StudyState]
    changed: Callable[[], None]
    _folded: dict[str, int] = field(default_factory=dict)
    """Study -> the last stream sequence folded (0: none yet); a key once followed."""
    _ids: dict[str, set[str]] = field(default_factory=dict)
    """Study -> ids of the stored events folded (to tell whether a live one is in yet)."""
    _behind: set[str] = field(default_factory=set)
    """Studies whose stream could not be read up to a live event: read on at the next pass."""
    _subs: list[Any] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _renewed: asyncio.Event = field(default_factory=asyncio.Event)
    _started: bool = False

    async def start(self) -> None:
        """Follow the known studies and every study stream there is, history first."""
        self.bus.reconnect_listeners.append(self._renewed.set)
        await self.rescan(set(self.studies))
        self._started = True

    async def run(self, stop: asyncio.Event) -> None:
        """Look for new study streams on each renewal and every `RESCAN_S`, until `stop`."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(self._renewed.wait(), RESCAN_S)
                renewed = True
            except TimeoutError:
                renewed = False
            self._renewed.clear()
            try:
                await self.rescan(again=renewed)
            except Exception as exc:  # the bus is down or slow: the next pass tries again
                log.warning("could not look for new studies: %s", exc)

    async def rescan(self, known: set[str] | None = None, *, again: bool = False) -> None:
        """Follow every study stream not yet followed (and `known` ones); `again`: read on in
        those already followed too (what came while this connection was away)."""
        names = await self.bus.stream_names(subjects.STUDY_STREAM_PREFIX)
        streams = {n.removeprefix(subjects.STUDY_STREAM_PREFIX) for n in names}
        for study in sorted(streams | (known or set())):
            if not is_name(study):
                continue
            if study not in self._folded:
                await self._follow(study)
                await self._catch_up(study, stored=study in streams)
            elif again or study in self._behind:
                self._behind.discard(study)
                await self._catch_up(study, stored=study in streams)

    async def _follow(self, study: str) -> None:
        self._folded[study] = 0

        async def live(msg: Any) -> None:
            event = decode_event(STUDY_DECODER, msg)  # a forgery is dropped (and logged)
            if event is None:
                return
            try:
                await self._catch_up(study, want=event.id)
            except Exception as exc:
                self._behind.add(study)
                log.warning("could not read study %s's stream (read again within %gs): %s",
                            study, RESCAN_S, exc)

        # Found after this connection was made: its rights may name the study only once
        # the authority renews it (a moment after the study was created).
        self._subs.append(await self.bus.subscribe_core(subjects.study_admin_all(study), live,
                                                        ahead=self._started))

    async def _catch_up(self, study: str, *, stored: bool = True,
                        want: str | None = None) -> None:
        """Fold what the stream holds of `study`'s admin events past the last one folded;
        `want`: until the event of that id is among them (or `STORED_WAIT_S`)."""
        if not stored:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STORED_WAIT_S
        delay = 0.02
        while True:
            async with self._lock:
                before = self.studies.get(study)
                await self._read_on(study)
                after = self.studies.get(study)
            if after != before and (before is None or after is None
                                    or before.sites != after.sites):
                self.changed()
            if want is None or want in self._ids.get(study, ()):
                return
            if loop.time() > deadline:
                self._behind.add(study)
                return
            await asyncio.sleep(delay)  # sent, and not yet in the stream: read again soon
            delay = min(delay * 2, 0.5)

    async def _read_on(self, study: str) -> None:
        stream = subjects.study_stream(study).name
        ids = self._ids.setdefault(study, set())
        async for item in replay(self.bus, stream, STUDY_DECODER,
                                 filters=[subjects.study_admin_all(study)],
                                 start_seq=self._folded.get(study, 0) + 1):
            self._folded[study] = item.seq
            event = item.event
            if event is None or not isinstance(event, study_state.StudyAdminEvents):
                continue
            ids.add(event.id)
            after = study_state.apply(self.studies.get(study), event)
            if after is not None:
                self.studies[study] = after
