"""The API's read endpoints, its SSE stream and its one write: a signed request passed on.

Every handler takes the `caller` (its token checked, its rights derived: `scope`) and
answers only what that caller could read on the bus; a study it may not read is a 404, as
if it did not exist. Lists are paged (`offset`, `limit` at most `MAX_LIMIT`) and filtered.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter, QueryParameter, SkipValidation
from litestar.response import Response, ServerSentEvent, ServerSentEventMessage

from cairn import api, subjects
from cairn.errors import InvalidInput, NotFound, PermissionDenied
from cairn.httpapi.context import ApiContext
from cairn.httpapi.models import (
    ApiError,
    Eligibility,
    EvidenceCheck,
    EvidencePage,
    EvidenceVerified,
    JobDetail,
    JobMetrics,
    JobsPage,
    JobSummary,
    RecipeExplained,
    RecipesPage,
    RecipeSummary,
    SitesPage,
    SiteSummary,
    StudiesPage,
    StudySummary,
    TimelinePage,
    Whoami,
    WorkerSummary,
)
from cairn.httpapi.scope import Caller
from cairn.names import check_name
from cairn.state.job import JobState

ERRORS = {status: ResponseSpec(data_container=ApiError, description=what, generate_examples=False)
          for status, what in (
    (400, "a parameter or the body is wrong (the field is named)"),
    (401, "no token, or one that does not check out"),
    (404, "no such thing, or not one the caller may read"),
    (413, "the body is too large"),
    (500, "an internal error (never a traceback)"),
    (503, "the bus or a service cannot be reached"),
    (504, "the bus or a service did not answer in time"))}
read = functools.partial(get, responses=ERRORS)
write = functools.partial(post, responses=ERRORS)
if TYPE_CHECKING:
    from cairn.httpapi.feeds import StudyFeed

MAX_LIMIT = 500
MAX_WRITE_BYTES = api.MAX_REQUEST_BYTES
WRITE_VERBS = frozenset({"submit", "cancel"})
"""The study verbs the API passes on: submit (and so rerun) and cancel."""

# Not validated: they are this service's own objects, made by its own providers.
Ctx = NamedDependency[SkipValidation[ApiContext]]
Who = NamedDependency[SkipValidation[Caller]]
"""The request's caller (`provide_caller`): its token checked, its rights derived."""
Offset = Annotated[int, Parameter(ge=0, le=10_000_000, description="items to skip")]
Limit = Annotated[int, Parameter(ge=1, le=MAX_LIMIT, description="items per page")]
Name = Annotated[str, Parameter(min_length=1, max_length=63,
                                pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
_FILTER = r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$"
Filter = Annotated[str | None, Parameter(max_length=63, pattern=_FILTER)]
StateFilter = Annotated[str | None, QueryParameter(name="state", max_length=63, pattern=_FILTER,
                                              description="only jobs in this state")]
TypeFilter = Annotated[str | None, QueryParameter(name="type", max_length=63, pattern=_FILTER,
                                             description="only events of this type")]


def _feed(ctx: Ctx, caller: Who, study: str) -> StudyFeed:
    check_name(study, "study")
    caller.require_study(study)
    feed = ctx.feeds.get(study)
    if feed is None:
        raise NotFound(f"no study {study}", field="study")
    return feed


def _job_summary(job: JobState) -> JobSummary:
    return JobSummary(
        job=job.job, study=job.study, name=job.name, state=job.state, actor=job.actor,
        submitted_at=job.submitted_at, updated_at=job.updated_at, ended_at=job.ended_at,
        message=job.message,
        workers=[WorkerSummary(site=w.site, role=w.role, rank=w.rank, state=w.state,
                               step=w.step, total=w.total, exit_code=w.exit_code)
                 for _, w in sorted(job.workers.items())])


def _study_summary(feed: StudyFeed) -> StudySummary:
    study = feed.study
    assert study is not None
    return StudySummary(name=study.name, description=study.description,
                        sites=list(study.sites), admins=sorted(study.admins),
                        created_at=study.created_at, jobs=len(feed.jobs),
                        last_seq=feed.last_seq)


@read("/v1/whoami", summary="Who the token says the caller is, and the studies it reads")
async def whoami(ctx: Ctx, caller: Who) -> Whoami:
    kind = caller.identity.kind.value if caller.identity else "anonymous"
    return Whoami(name=caller.name, kind=kind, studies=caller.studies(ctx.feeds.names()),
                  secure=ctx.secure)


@read("/v1/studies", summary="The studies the caller may read")
async def studies(ctx: Ctx, caller: Who, offset: Offset = 0,
                  limit: Limit = 50) -> StudiesPage:
    names = caller.studies(ctx.feeds.names())
    feeds = [f for n in names[offset:offset + limit] if (f := ctx.feeds.get(n))]
    return StudiesPage(items=[_study_summary(f) for f in feeds], total=len(names),
                       offset=offset, limit=limit)


@read("/v1/studies/{study:str}", summary="One study")
async def study(ctx: Ctx, caller: Who, study: Name) -> StudySummary:
    return _study_summary(_feed(ctx, caller, study))


@read("/v1/studies/{study:str}/jobs", summary="A study's jobs, the last submitted first")
async def jobs(ctx: Ctx, caller: Who, study: Name, offset: Offset = 0,
               limit: Limit = 50, job_state: StateFilter = None, name: Filter = None,
               site: Filter = None) -> JobsPage:
    feed = _feed(ctx, caller, study)
    jobs = (feed.jobs[j] for j in reversed(feed.order))
    found = [j for j in jobs
             if (job_state is None or j.state == job_state) and (name is None or j.name == name)
             and (site is None or any(w.site == site for w in j.workers.values()))]
    return JobsPage(items=[_job_summary(j) for j in found[offset:offset + limit]],
                    total=len(found), offset=offset, limit=limit)


def _job(feed: StudyFeed, job: str) -> JobState:
    check_name(job, "job")
    found = feed.jobs.get(job)
    if found is None:
        raise NotFound(f"no job {job} in study {feed.name}", field="job")
    return found


@read("/v1/studies/{study:str}/jobs/{job:str}", summary="One job: its state as folded")
async def job(ctx: Ctx, caller: Who, study: Name, job: Name) -> JobDetail:
    found = _job(_feed(ctx, caller, study), job)
    return JobDetail(summary=_job_summary(found), state=found)


@read("/v1/studies/{study:str}/jobs/{job:str}/timeline", summary="One job's events in order")
async def job_timeline(ctx: Ctx, caller: Who, study: Name, job: Name,
                       offset: Offset = 0, limit: Limit = 100) -> TimelinePage:
    feed = _feed(ctx, caller, study)
    _job(feed, job)
    items = feed.by_job.get(job, [])
    return TimelinePage(items=items[offset:offset + limit], total=len(items), offset=offset,
                        limit=limit)


@read("/v1/studies/{study:str}/jobs/{job:str}/metrics",
     summary="One job's metrics per round and worker (FedAvg accuracy and loss)")
async def job_metrics(ctx: Ctx, caller: Who, study: Name, job: Name) -> JobMetrics:
    feed = _feed(ctx, caller, study)
    _job(feed, job)
    points = list(feed.metrics.get(job, []))
    names = sorted({k for p in points for k in p.values})
    return JobMetrics(job=job, points=points, names=names)


@read("/v1/studies/{study:str}/timeline", summary="A study's events in order")
async def study_timeline(ctx: Ctx, caller: Who, study: Name, offset: Offset = 0,
                         limit: Limit = 100, kind: TypeFilter = None) -> TimelinePage:
    feed = _feed(ctx, caller, study)
    items = feed.timeline if kind is None else [e for e in feed.timeline if e.type == kind]
    return TimelinePage(items=items[offset:offset + limit], total=len(items), offset=offset,
                        limit=limit)


@read("/v1/studies/{study:str}/events", summary="A study's live events (server-sent events)",
     description="Each event is one timeline entry as JSON, its `id` the stream sequence; "
                 "a client that reconnects with `Last-Event-ID` misses nothing.")
async def study_events(ctx: Ctx, caller: Who, request: Request[Any, Any, Any],
                       study: Name, after: Offset = 0) -> ServerSentEvent:
    from cairn.httpapi.feeds import listen

    feed = _feed(ctx, caller, study)
    last = request.headers.get("last-event-id", "")
    if last.isdigit() and len(last) < 19:
        after = max(after, int(last))

    async def stream() -> AsyncIterator[ServerSentEventMessage]:
        async for e in listen(feed, after):
            yield ServerSentEventMessage(data=msgspec.json.encode(e).decode(), id=e.seq,
                                         event="entry")

    return ServerSentEvent(stream())


@write("/v1/studies/{study:str}/requests", status_code=200,
      summary="Pass the caller's own signed request (submit, cancel) to the coordinator",
      description="The body is a `cairn.api` envelope exactly as `cairn` sends it on the "
                  "bus, signed by the caller's key. It is sent on unchanged; the answer is "
                  "the coordinator's reply. The HTTP layer adds no authority: an unsigned or "
                  "tampered envelope is refused by the coordinator as it would be on the bus.")
async def request_passthrough(ctx: Ctx, caller: Who,
                              request: Request[Any, Any, Any],
                              study: Name) -> Response[bytes]:
    check_name(study, "study")
    raw = await request.body()
    envelope = envelope_of(ctx, raw, study, field="body")
    return await pass_on(ctx, study, envelope, raw)


def envelope_of(ctx: ApiContext, raw: bytes, study: str, *, field: str) -> api.Envelope:
    """The request envelope `raw`, one the API passes on to `study`'s coordinator.

    Raises:
        InvalidInput: too large, not an envelope, a verb not passed on, another study.
        PermissionDenied: unsigned, in a secure federation.
    """
    if len(raw) > MAX_WRITE_BYTES:
        raise InvalidInput(f"a request is at most {MAX_WRITE_BYTES} bytes", field=field)
    try:
        envelope = msgspec.json.decode(raw, type=api.Envelope)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidInput(f"the {field} is not a request envelope: {exc}",
                           field=field) from None
    verb = api.verb_of(envelope.request)
    if verb not in WRITE_VERBS:
        raise InvalidInput(f"the API passes on {', '.join(sorted(WRITE_VERBS))}, not {verb!r}",
                           field="request.type")
    if envelope.study != study:
        raise InvalidInput(f"the envelope names study {envelope.study!r}, the path {study!r}",
                           field="study")
    if ctx.secure and not (envelope.signature and envelope.key_id):
        raise PermissionDenied("unsigned request: sign it with your credential (as `cairn` "
                               "does)", field="signature")
    return envelope


async def pass_on(ctx: ApiContext, study: str, envelope: api.Envelope,
                  raw: bytes) -> Response[bytes]:
    """`raw` sent unchanged to the coordinator; its reply, with the error's status."""
    reply = await ctx.bus.request(subjects.api_study(study, api.verb_of(envelope.request)),
                                  raw, timeout=ctx.request_timeout_s)
    decoded = msgspec.json.decode(reply, type=api.Reply)
    status = 200 if decoded.ok else _status_of(decoded.error)
    return Response(content=reply, status_code=status, media_type="application/json")


def _status_of(error: api.ErrorBody | None) -> int:
    from cairn.errors import from_dict

    if error is None:
        return 500
    return from_dict(msgspec.to_builtins(error)).http_status


@read("/v1/sites", summary="The federation's sites the caller may read")
async def sites(ctx: Ctx, caller: Who, offset: Offset = 0, limit: Limit = 50,
                backend: Filter = None) -> SitesPage:
    found = [f.summary() for n, f in sorted(ctx.facts.sites.items())
             if caller.may_read_site(n) and (backend is None or f.backend == backend)]
    return SitesPage(items=found[offset:offset + limit], total=len(found), offset=offset,
                     limit=limit)


@read("/v1/sites/{site:str}", summary="One site: backend, latest snapshot, drift, validations")
async def site(ctx: Ctx, caller: Who, site: Name) -> SiteSummary:
    facts = ctx.facts.sites.get(site)
    if facts is None or not caller.may_read_site(site):
        raise NotFound(f"no site {site}", field="site")
    return facts.summary()


@read("/v1/sites/{site:str}/eligibility", summary="Per recipe: is the site eligible, and why")
async def site_eligibility(ctx: Ctx, caller: Who, site: Name) -> list[Eligibility]:
    from datetime import UTC, datetime

    from cairn.evidence.status import eligibility

    if site not in ctx.facts.sites or not caller.may_read_site(site):
        raise NotFound(f"no site {site}", field="site")
    found = await eligibility(ctx.bus, ctx.recipes.trust, now=datetime.now(UTC),
                              max_age=None, site=site)
    return [Eligibility(site=e.site, recipe=e.recipe, eligible=e.eligible, reason=e.reason,
                        message=e.message, evidence=e.evidence, until=e.until)
            for e in found if caller.may_read_evidence(e.site, e.recipe)]


@read("/v1/recipes", summary="The recipe catalog, filtered by service, accelerator, os, "
     "intent, platform and nodes, each with its evidence status")
async def recipes(ctx: Ctx, caller: Who, offset: Offset = 0, limit: Limit = 50,
                  service: Filter = None, accelerator: Filter = None, os: Filter = None,
                  intent: Filter = None, platform: Filter = None,
                  nodes: Annotated[int | None, Parameter(ge=0, le=100_000)] = None,
                  status: Filter = None) -> RecipesPage:
    await _refresh(ctx)
    entries = ctx.recipes.entries(service=service, accelerator=accelerator, os=os,
                                  intent=intent, platform=platform, nodes=nodes)
    shown = [ctx.recipes.summary(e) for e in entries]
    if status is not None:
        shown = [s for s in shown if s.status == status.upper()]
    return RecipesPage(items=shown[offset:offset + limit], total=len(shown), offset=offset,
                       limit=limit)


async def _refresh(ctx: ApiContext) -> None:
    await ctx.recipes.refresh(ctx.bus, [(e.recipe, e.bundle) for e in ctx.facts.evidence],
                              ctx.facts.generation)


@read("/v1/recipes/{name:str}", summary="One recipe and its evidence status")
async def recipe(ctx: Ctx, caller: Who, name: Name) -> RecipeSummary:
    await _refresh(ctx)
    return ctx.recipes.summary(ctx.recipes.entry(name))


@read("/v1/recipes/{name:str}/resolved", summary="A recipe fully resolved")
async def recipe_resolved(ctx: Ctx, caller: Who, name: Name) -> dict[str, object]:
    return ctx.recipes.resolved(name)


@read("/v1/recipes/{name:str}/explain", summary="Every resolved value with the file that set it")
async def recipe_explain(ctx: Ctx, caller: Who, name: Name) -> RecipeExplained:
    return ctx.recipes.explain(name)


@read("/v1/evidence", summary="Evidence recorded, newest first")
async def evidence(ctx: Ctx, caller: Who, offset: Offset = 0, limit: Limit = 50,
                   site: Filter = None, recipe: Filter = None) -> EvidencePage:
    found = [e for e in reversed(ctx.facts.evidence)
             if caller.may_read_evidence(e.site, e.recipe)
             and (site is None or e.site == site) and (recipe is None or e.recipe == recipe)]
    return EvidencePage(items=found[offset:offset + limit], total=len(found), offset=offset,
                        limit=limit)


@read("/v1/evidence/{bundle:str}/verify", summary="Verify one recorded bundle offline")
async def evidence_verify(ctx: Ctx, caller: Who,
                          bundle: Annotated[str, Parameter(pattern=r"^[0-9a-f]{64}$")]
                          ) -> EvidenceVerified:
    from datetime import UTC, datetime

    from cairn.evidence.store import fetch_bundle
    from cairn.evidence.verify import verify_bundle

    item = next((e for e in ctx.facts.evidence if e.bundle == bundle), None)
    if item is None or not caller.may_read_evidence(item.site, item.recipe):
        raise NotFound(f"no evidence bundle {bundle}", field="bundle")
    files = await fetch_bundle(ctx.bus, bundle)
    result = verify_bundle(files, ctx.recipes.trust, now=datetime.now(UTC))
    return EvidenceVerified(bundle=bundle, valid=result.valid,
                            checks=[EvidenceCheck(name=c.name, ok=c.passed, reason=c.reason,
                                                  message=c.message)
                                    for c in result.checks],
                            signers=[s.name for s in result.signers])


ROUTES = [whoami, studies, study, jobs, job, job_timeline, job_metrics, study_timeline,
          study_events, request_passthrough, sites, site, site_eligibility, recipes, recipe,
          recipe_resolved, recipe_explain, evidence, evidence_verify]
