"""The stable Python client: what the CLI, `cairn demo` and other programs use.

Every verb is one typed request (`cairn.api`) in an `Envelope` on `cairn.api.fed.<verb>` or
`cairn.api.study.<study>.<verb>`, answered by a `Reply`. A reply that is not ok is raised as
the typed error it names, so a caller sees `NotFound`, `PermissionDenied`, ... exactly as the
coordinator decided. Results are the same Structs the services fold (`JobState`, `StudyState`,
`SiteInfo`).

    async with await Client.connect(study="lung") as c:
        job_id = await c.submit("job.yaml")
        final = await c.wait(job_id, timeout=600)

In a secure federation every request is signed with the session's credential and the
coordinator records the signer as the actor (`cairn.trust.requests`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from cairn import api, subjects
from cairn import codebundle as bundle
from cairn.api import FederationInfo, SiteInfo
from cairn.bus import Bus, NoResponders, objects
from cairn.client import deadletters
from cairn.client.connect import connect as connect_bus
from cairn.client.deadletters import DeadLetter, delete_message, get_message
from cairn.client.history import study_events, study_replay
from cairn.client.jobrequest import JobRequest, request_of_spec, request_of_submitted
from cairn.client.logs import LogChunk, worker_logs
from cairn.client.payload import check_fits
from cairn.client.readers import refuse_if_reader
from cairn.client.timeline import TimelineEntry
from cairn.errors import InvalidInput, NotFound, Timeout, Unavailable
from cairn.events import StudyAdmin
from cairn.names import check_name
from cairn.runtime import context as context_file
from cairn.spec.job import load_job_spec
from cairn.spec.params import apply_sets
from cairn.state.job import JobState
from cairn.state.study import StudyState
from cairn.state.view import StudyView
from cairn.trust.requests import RequestSigner

if TYPE_CHECKING:
    from cairn.client.evidence import EvidenceClient
    from cairn.client.validation import ValidationResult
    from cairn.snapshot.model import Snapshot

R = TypeVar("R", bound=api.Result)

__all__ = ["Client", "DeadLetter", "JobRequest", "LogChunk", "delete_message", "get_message"]


REJOIN_S = 5.0
"""How long a request keeps asking while nothing answers on its subject (a service reconnecting
after its session was renewed takes well under that); then "nothing answers" is the answer."""


def _lost(bus: object) -> bool:
    lost = getattr(bus, "lost", None)
    return bool(lost is not None and lost.is_set())


class Client:
    """A session with the federation: one bus connection, one study, one actor."""

    def __init__(
        self,
        bus: Bus,
        *,
        study: str | None = None,
        actor: str | None = None,
        request_timeout: float = 10.0,
    ) -> None:
        self._bus = bus
        self._study = study
        self.actor = actor
        self.timeout = request_timeout
        self._signer: RequestSigner | None = None

    @classmethod
    async def connect(
        cls,
        context: context_file.Context | None = None,
        study: str | None = None,
        actor: str | None = None,
        *,
        request_timeout: float = 10.0,
    ) -> Client:
        """Connect using the context file (or `CAIRN_NATS_URL`).

        `study` and `actor` come from the arguments, else `CAIRN_STUDY` / `CAIRN_ACTOR`, else
        the context file's defaults.

        Raises:
            Unavailable: no context and no `CAIRN_NATS_URL`, or NATS cannot be reached.
        """
        ctx = context or context_file.load()
        assert ctx is not None  # load(required=True) raises instead of returning None
        bus = await connect_bus(ctx, name="cairn-client",
                                limit=min(request_timeout, 5.0))
        return cls(
            bus,
            study=study or os.environ.get("CAIRN_STUDY") or ctx.study,
            actor=actor or os.environ.get("CAIRN_ACTOR") or ctx.actor,
            request_timeout=request_timeout,
        )

    async def close(self) -> None:
        await self._bus.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def study(self) -> str:
        """The session's study (raises `InvalidInput` when the session has none)."""
        if not self._study:
            raise InvalidInput("no study: pass --study or set CAIRN_STUDY", field="study")
        return self._study

    # -- requests -------------------------------------------------------------------------

    async def call(self, subject: str, request: api.Request, *, study: str | None = None
                   ) -> api.Result:
        """Send one typed request; return the reply's result or raise its typed error."""
        self.may_ask(f"`{api.verb_of(request)}` is a request to the federation's services")
        envelope = api.Envelope(request=request, actor=self.actor, study=study)
        read = type(request) in api.READS
        # Asked again (signed afresh: the same bytes would be a replay) for a moment while
        # nothing answers, as while the service reconnects after the authority renewed its
        # session: "nothing answers" means nothing received it, so even a write is safe to
        # send again. A read is also asked once more when its reply was lost; a write whose
        # reply was lost may have been applied and is never sent twice.
        deadline = time.monotonic() + REJOIN_S
        retried = False
        while True:
            try:
                data = await self._bus.request(subject, self._payload(envelope),
                                               timeout=self.timeout)
                return api.decode_reply(data, subject=subject)
            except Timeout:
                if retried or not read:
                    raise
                retried = True
            except Unavailable as exc:
                if (not read and not isinstance(exc, NoResponders)) \
                        or time.monotonic() >= deadline or _lost(self._bus):
                    raise
                await asyncio.sleep(0.1)

    def may_ask(self, what: str) -> None:
        """Refuse, before anything is sent, what a reader's session cannot ask
        (`cairn.client.readers`); `what` says what it needs."""
        refuse_if_reader(getattr(self._bus, "creds", None), what)

    def _payload(self, envelope: api.Envelope) -> bytes:
        """The bytes sent for `envelope`: signed with the connection's credential key when
        it has one (a secure federation), over exactly these bytes (`cairn.trust.requests`)."""
        creds = getattr(self._bus, "creds", None)
        if not creds:
            return api.encode_envelope(envelope)
        if self._signer is None:
            self._signer = RequestSigner.from_creds(creds)
        return self._signer.sign(envelope)

    async def call_fed(self, request: api.Request) -> api.Result:
        return await self.call(subjects.api_fed(api.verb_of(request)), request)

    async def call_study(self, request: api.Request, *, study: str | None = None
                         ) -> api.Result:
        name = study or self.study
        return await self.call(subjects.api_study(name, api.verb_of(request)), request,
                               study=name)

    # -- federation and studies -----------------------------------------------------------

    async def federation(self) -> FederationInfo:
        return _expect(await self.call_fed(api.FederationShow()), api.FederationResult).federation

    async def study_create(
        self, name: str, sites: list[str], admins: list[StudyAdmin], description: str = ""
    ) -> StudyState:
        # The coordinator checks names too; checking here fails fast, before any request.
        check_name(name, "study")
        for site in sites:
            check_name(site, "site")
        request = api.StudyCreate(name=name, sites=list(sites), admins=list(admins),
                                  description=description)
        return _expect(await self.call_fed(request), api.StudyResult).study

    async def study_list(self) -> list[StudyState]:
        return _expect(await self.call_fed(api.StudyList()), api.StudiesResult).studies

    async def study_show(self) -> StudyState:
        return await self._study_change(api.StudyShow())

    async def study_add_site(self, site: str) -> StudyState:
        return await self._study_change(api.StudyAddSite(site=site))

    async def study_remove_site(self, site: str) -> StudyState:
        return await self._study_change(api.StudyRemoveSite(site=site))

    async def study_add_admin(self, name: str, org: str, role: str) -> StudyState:
        return await self._study_change(api.StudyAddAdmin(name=name, org=org, role=role))

    async def study_remove_admin(self, name: str) -> StudyState:
        return await self._study_change(api.StudyRemoveAdmin(name=name))

    async def study_hold(self, held: bool = True, reason: str = "") -> StudyState:
        """Hold the study's queue (nothing is dispatched), or release it."""
        return await self._study_change(api.StudySetHold(held=held, reason=reason))

    async def _study_change(self, request: api.Request) -> StudyState:
        return _expect(await self.call_study(request), api.StudyResult).study

    # -- jobs -----------------------------------------------------------------------------

    async def submit(self, spec_path: str | Path, sets: Sequence[str] = ()) -> str:
        """Load a job spec, apply `sets` (`params.KEY=VALUE`, `cairn.spec.params`), upload its
        code bundle, submit it; returns the job id.

        The spec's `study:` wins over the session's study.

        Raises:
            InvalidInput: the spec or a set is wrong (naming file, line and field), or it
                would not fit in one bus message.
        """
        self.may_ask("`submit` is a request to the coordinator")
        spec = apply_sets(load_job_spec(spec_path), sets, file=str(spec_path))
        study = spec.study or self.study
        packed = bundle.pack(spec.code)
        request = request_of_spec(spec, packed.digest)
        # Refuse a spec the bus cannot carry before the bundle is uploaded or anything sent.
        size = len(self._payload(api.Envelope(request=api.Submit(spec=request),
                                              actor=self.actor, study=study)))
        check_fits(size, self._bus.max_payload, subjects.api_study(study, "submit"),
                   file=str(spec_path))
        await self.upload(packed.data, study=study)
        return await self.submit_request(request, study=study)

    async def upload(self, data: bytes, *, study: str | None = None) -> str:
        """Store bytes in the study's artifacts, content-addressed; returns the sha256."""
        self.may_ask("uploading a code bundle writes the study's artifacts")
        store = await objects(self._bus, subjects.obj_artifacts(study or self.study))
        return await store.put(data)

    async def submit_request(self, request: JobRequest, *, study: str | None = None) -> str:
        result = await self.call_study(api.Submit(spec=request), study=study)
        return _expect(result, api.Submitted).job

    async def jobs(self, state: str | None = None) -> list[JobState]:
        return _expect(await self.call_study(api.JobList(state=state)), api.JobsResult).jobs

    async def job(self, job_id: str) -> JobState:
        return _expect(await self.call_study(api.JobShow(job=job_id)), api.JobResult).job

    async def cancel(self, job_id: str, reason: str = "cancelled") -> JobState:
        """Ask for the job to be cancelled; returns the job as it stands after the ask."""
        _expect(await self.call_study(api.JobCancel(job=job_id, reason=reason)),
                api.CancelAccepted)
        return await self.job(job_id)

    async def fetch(self, job_id: str, dest: str | Path) -> list[Path]:
        """Download the job's result files and values into `dest`; returns the paths."""
        from cairn.client.results import fetch_results

        return await fetch_results(self._bus, await self.job(job_id), dest)

    async def rerun(self, job_id: str) -> str:
        """Submit a recorded job again: same request, same code bundle, `rerun_of` set."""
        job = await self.job(job_id)
        request = request_of_submitted(job.spec, rerun_of=job.job)
        return await self.submit_request(request, study=job.study or None)

    async def watch(
        self,
        job_id: str,
        *,
        poll: float = 0.2,
        timeout: float | None = None,  # noqa: ASYNC109 - polled, in seconds
    ) -> AsyncIterator[JobState]:
        """Yield the job each time it changes, ending after a terminal state.

        Raises:
            Timeout: the job did not end within `timeout` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        last: JobState | None = None
        while True:
            current = await self.job(job_id)
            if current != last:
                last = current
                yield current
            if current.terminal:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise Timeout(f"job {job_id} is still {current.state} after {timeout:g}s")
            await asyncio.sleep(poll)

    async def wait(
        self,
        job_id: str,
        timeout: float | None = None,
        *,  # noqa: ASYNC109
        poll: float = 0.2,
    ) -> JobState:
        """Wait until the job ends; returns its final state."""
        final: JobState | None = None
        async for state in self.watch(job_id, poll=poll, timeout=timeout):
            final = state
        assert final is not None
        return final

    async def logs(
        self,
        job_id: str,
        site: str | None = None,
        *,
        follow: bool = False,
        poll: float = 0.5,
        max_bytes: int = 256 * 1024,
        timeout: float | None = None,  # noqa: ASYNC109 - polled, in seconds
    ) -> AsyncIterator[LogChunk]:
        """Worker logs the launchers captured, per worker, in order.

        Without `follow`: what is there now. With it: keep reading until every worker has
        exited, all was read and the job ended (or `timeout` passed). A site whose launcher
        does not answer yields one chunk with `error` set instead of failing the whole read.
        """
        async for chunk in worker_logs(
            self.call,
            lambda: self.job(job_id),
            site=site,
            follow=follow,
            poll=poll,
            max_bytes=max_bytes,
            limit_s=timeout,
        ):
            yield chunk

    # -- sites ----------------------------------------------------------------------------

    async def sites(self) -> list[SiteInfo]:
        """The study's sites when the session has a study, else every site of the federation."""
        if self._study:
            return _expect(await self.call_study(api.StudySites()), api.SitesResult).sites
        return _expect(await self.call_fed(api.SiteList()), api.SitesResult).sites

    async def site(self, name: str) -> SiteInfo:
        if self._study:
            return _expect(await self.call_study(api.StudySite(site=name)), api.SiteResult).site
        for info in await self.sites():
            if info.name == name:
                return info
        raise NotFound(f"site {name} is not in the federation", field="site")

    # -- snapshots and validation --------------------------------------------------------

    async def snapshot(self, site: str, *, timeout: float = 60.0) -> Snapshot:
        """A fresh snapshot of `site`, taken by its snapshotter (and recorded in FEDERATION)."""
        from cairn.snapshot.remote import ask

        self.may_ask("a snapshot is a request to the site's snapshotter")
        return await ask(self._bus, site, timeout)

    async def validate(self, site: str, recipe: str, *, fresh: bool = True,
                       timeout: float = 3600.0, out: Path | None = None) -> ValidationResult:
        """Validate `site` against `recipe` through the validator and wait for the result;
        with `out`, write the files an evidence bundle holds there."""
        from cairn.client.validation import CLOCK_SKEW_S, validate

        check_name(site, "site")
        check_name(recipe, "recipe")
        since = datetime.now(UTC) - timedelta(seconds=CLOCK_SKEW_S)
        request = api.ValidationRun(site=site, recipe=recipe, fresh=fresh)
        accepted = _expect(await self.call(subjects.api_validation("run"), request),
                           api.ValidationAccepted)
        return await validate(self._bus, accepted, since, timeout=timeout, out=out)

    @property
    def evidence(self) -> EvidenceClient:
        """Evidence verbs: latest bundle, a recipe's bundles, eligibility, submit, receipts."""
        from cairn.client.evidence import EvidenceClient

        self.may_ask("evidence is read from the federation's streams and the coordinator")
        return EvidenceClient(self._bus, self.call)

    # -- the study stream -----------------------------------------------------------------

    async def events(
        self,
        *,
        tail: int | None = None,
        follow: bool = False,
        poll: float = 0.5,
        job: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - polled, in seconds
    ) -> AsyncIterator[TimelineEntry]:
        """The study's events as timeline entries: the last `tail` (all when None), then,
        with `follow`, new ones as they are stored (until `timeout`, if given)."""
        async for e in study_events(self._bus, self.study, tail=tail, follow=follow,
                                    poll=poll, job=job, timeout=timeout):
            yield e

    async def replay(self, job: str | None = None) -> tuple[StudyView, list[TimelineEntry]]:
        """Fold the study's stream (or one job's subjects): the state and the timeline."""
        return await study_replay(self._bus, self.study, job)

    # -- dead letters (federation-wide; see cairn.client.deadletters) ----------------------------

    async def dead_letters(self) -> list[DeadLetter]:
        self.may_ask("dead letters are the federation's")
        return await deadletters.list_all(self._bus)

    async def dead_letter(self, seq: int) -> DeadLetter:
        self.may_ask("dead letters are the federation's")
        return await deadletters.read(self._bus, seq)

    async def redrive(self, seq: int) -> int:
        self.may_ask("dead letters are the federation's")
        return await deadletters.redrive(self._bus, seq, publish_timeout=self.timeout)


def _expect(result: api.Result, type_: type[R]) -> R:
    """The result as the type the verb answers with (another is the service's fault)."""
    if not isinstance(result, type_):
        raise InvalidInput(f"unexpected answer: a {type(result).__name__} result where "
                           f"{type_.__name__} was expected")
    return result
