"""The dashboard: server-rendered pages over the same reads as the API, for the same caller.

Every page is whole without JavaScript (tables, filters as plain GET forms, the metrics plot
as inline SVG); `static/dashboard.js` only keeps the live views live (a study's jobs, a job's
timeline and plot) from the study's event stream. A browser signs in once with a token
(`cairn api token`), kept in an HttpOnly, SameSite=Strict cookie for its lifetime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from litestar import Request, Response, get
from litestar.datastructures import Cookie
from litestar.handlers import HTTPRouteHandler
from litestar.params import PathParameter, QueryParameter
from litestar.static_files import create_static_files_router

from cairn.errors import CairnError, NotFound, PermissionDenied
from cairn.httpapi import routes
from cairn.httpapi.context import ApiContext
from cairn.httpapi.html import Html, badge, join, link, metrics_plot, page, table, tag
from cairn.httpapi.recipes import FILTERS
from cairn.httpapi.routes import Ctx
from cairn.httpapi.scope import Caller
from cairn.trust import apitoken

COOKIE = "cairn_token"
RECIPES_PER_PAGE = 100
Segment = Annotated[str, PathParameter(max_length=200)]
STATIC_DIR = Path(__file__).parent / "static"


def token_of(request: Request[Any, Any, Any]) -> str | None:
    """The caller's credential: the Authorization header, else the dashboard's cookie."""
    header = request.headers.get("authorization")
    if header:
        return header
    cookie = request.cookies.get(COOKIE)
    return f"Bearer {cookie}" if cookie else None


def _html(body: Html, status: int = 200) -> Response[str]:
    return Response(str(body), status_code=status, media_type="text/html; charset=utf-8",
                    headers={"Content-Security-Policy": "default-src 'self'; "
                             "style-src 'self'; script-src 'self'; img-src 'self' data:",
                             "X-Content-Type-Options": "nosniff"})


def _login(message: str, status: int = 401) -> Response[str]:
    form = tag("form", tag("label", "API token ", tag("input", name="token", type="password",
                                                      autocomplete="off", required=True)),
               tag("button", "Sign in", type="submit"), action="/login", method="get")
    body = join([tag("p", message, class_="error"),
                 tag("p", "Mint a token with ", tag("code", "cairn api token"),
                     ": it reads exactly what your own credential may read, for at most ",
                     f"{apitoken.MAX_LIFETIME_S // 60} minutes."), form])
    return _html(page("Sign in", body, who="not signed in"), status)


def _caller(ctx: ApiContext, request: Request[Any, Any, Any]) -> Caller:
    from cairn.httpapi.clientcert import client_cert_of

    return ctx.caller(token_of(request), client_cert_of(request.scope))


def _render(ctx: ApiContext, request: Request[Any, Any, Any], build: Any) -> Response[str]:
    """Run `build(caller)` and answer its page; a caller who is not signed in gets the
    sign-in form, a missing thing one error page (never a traceback)."""
    try:
        caller = _caller(ctx, request)
    except PermissionDenied as exc:
        return _login(exc.message)
    try:
        return _html(build(caller))
    except NotFound as exc:
        return _html(page("Not found", tag("p", exc.message, class_="error"),
                          who=caller.name), 404)
    except CairnError as exc:
        return _html(page("Error", tag("p", exc.message, class_="error"), who=caller.name),
                     exc.http_status)


@get("/login", include_in_schema=False)
async def login(ctx: Ctx, token: Annotated[str, QueryParameter()] = "") -> Response[str]:
    if len(token) > apitoken.MAX_TOKEN_BYTES:
        return _login("that token is too long")
    try:
        ctx.caller(f"Bearer {token}")
    except PermissionDenied as exc:
        return _login(exc.message)
    answer = Response("", status_code=303, headers={"Location": "/"})
    answer.cookies.append(Cookie(key=COOKIE, value=token, httponly=True, samesite="strict",
                                 secure=ctx.secure, max_age=apitoken.MAX_LIFETIME_S,
                                 path="/"))
    return answer


@get("/", include_in_schema=False)
async def overview(ctx: Ctx, request: Request[Any, Any, Any]) -> Response[str]:
    def build(caller: Caller) -> Html:
        studies = [ctx.feeds.get(n) for n in caller.studies(ctx.feeds.names())]
        rows = [(link(f"/studies/{f.name}", f.name), ", ".join(f.study.sites), len(f.jobs),
                 sum(1 for j in f.jobs.values() if not j.terminal))
                for f in studies if f is not None and f.study is not None]
        return join([tag("h2", "Studies"),
                     table(("study", "sites", "jobs", "active"), rows, id="studies")])
    return _render(ctx, request, build)


@get("/studies/{study:str}", include_in_schema=False)
async def study_page(ctx: Ctx, request: Request[Any, Any, Any], study: Segment) -> Response[str]:
    def build(caller: Caller) -> Html:
        feed = routes._feed(ctx, caller, study)
        jobs = [feed.jobs[j] for j in reversed(feed.order)]
        rows = [(link(f"/studies/{study}/jobs/{j.job}", j.job), j.name, badge(j.state),
                 join(tag("span", f"{w.site}:{w.state} ", class_="worker")
                      for _, w in sorted(j.workers.items())),
                 j.submitted_at.strftime("%Y-%m-%d %H:%M:%S"))
                for j in jobs[:200]]
        return page(f"Study {study}", join([
            tag("p", f"{len(feed.jobs)} jobs; live", class_="live", id="live-state"),
            table(("job", "name", "state", "per site", "submitted"), rows, id="jobs")]),
            who=caller.name, script="dashboard.js",
            data={"study": study, "view": "study", "seq": str(feed.last_seq)})
    return _render(ctx, request, build)


@get("/studies/{study:str}/jobs/{job:str}", include_in_schema=False)
async def job_page(ctx: Ctx, request: Request[Any, Any, Any], study: Segment,
                   job: Segment) -> Response[str]:
    def build(caller: Caller) -> Html:
        feed = routes._feed(ctx, caller, study)
        state = routes._job(feed, job)
        points = feed.metrics.get(job, [])
        names = sorted({k for p in points for k in p.values})
        workers = [(w.site, w.role, w.rank, badge(w.state), w.step if w.step is not None
                    else "", w.exit_code if w.exit_code is not None else "")
                   for _, w in sorted(state.workers.items())]
        events = [(e.seq, e.at.strftime("%H:%M:%S.%f")[:-3] if e.at else "", e.type, e.summary)
                  for e in feed.by_job.get(job, [])]
        rounds = sorted({p.step for p in points if p.step is not None})
        return page(f"Job {state.name}", join([
            tag("p", link(f"/studies/{study}", f"study {study}"), " · ", tag("code", job),
                " · ", badge(state.state), id="job-state", data_state=state.state),
            tag("h2", "Metrics per round"),
            tag("p", f"rounds: {len(rounds)}", id="rounds", data_rounds=len(rounds)),
            tag("div", metrics_plot(points, names), id="plot"),
            tag("h2", "Workers"),
            table(("site", "role", "rank", "state", "round", "exit"), workers, id="workers"),
            tag("h2", "Timeline"),
            table(("seq", "at", "event", "what"), events, id="timeline")]),
            who=caller.name, script="dashboard.js",
            data={"study": study, "job": job, "view": "job", "seq": str(feed.last_seq)})
    return _render(ctx, request, build)


@get("/recipes", include_in_schema=False)
async def recipes_page(ctx: Ctx, request: Request[Any, Any, Any]) -> Response[str]:
    given = {k: request.query_params.get(k) or None for k in FILTERS}
    status = request.query_params.get("status") or None
    given_offset = request.query_params.get("offset") or "0"
    offset = int(given_offset) if given_offset.isdigit() and len(given_offset) < 9 else 0
    await routes._refresh(ctx)

    def build(caller: Caller) -> Html:
        catalog = ctx.recipes.catalog
        nodes = given.pop("nodes", None)
        entries = ctx.recipes.entries(**given, nodes=int(nodes) if nodes and nodes.isdigit()
                                      else None)
        shown = [ctx.recipes.summary(e) for e in entries]
        if status:
            shown = [s for s in shown if s.status == status]
        selects = []
        for name in FILTERS[:5]:
            values = sorted({str(getattr(e.spec.criteria, name))
                             for e in catalog.overlays.values()} - {"any"})
            options = join([tag("option", "any", value=""),
                            *(tag("option", v, value=v, selected=given.get(name) == v)
                              for v in values)])
            selects.append(tag("label", f"{name} ", tag("select", options, name=name)))
        states = join([tag("option", "any", value=""),
                       *(tag("option", s, value=s, selected=status == s)
                         for s in ("CONFIRMED", "SINGLE", "CONTESTED", "FAILING", "UNTESTED"))])
        form = tag("form", join(selects), tag("label", "status ",
                                              tag("select", states, name="status")),
                   tag("button", "Filter", type="submit"), method="get", action="/recipes",
                   id="filters")
        rows = [(tag("span", s.name, class_="recipe"), s.description, badge(s.status),
                 ", ".join(f"{k}={v}" for k, v in s.criteria.items() if v not in ("any", 0)),
                 ", ".join(s.hardware), ", ".join(s.checks), ", ".join(s.signers))
                for s in shown[offset:offset + RECIPES_PER_PAGE]]
        last = min(offset + RECIPES_PER_PAGE, len(shown))
        count = (f"{len(shown)} of {len(catalog.overlays)} recipes"
                 + (f"; {offset + 1} to {last} shown" if len(shown) > RECIPES_PER_PAGE else ""))
        return page("Recipes", join([
            form, tag("p", count, id="count"),
            table(("recipe", "description", "status", "criteria", "tested on", "checks",
                   "signers"), rows, id="recipes"),
            _pager(request, offset, len(shown))]), who=caller.name)
    return _render(ctx, request, build)


def _pager(request: Request[Any, Any, Any], offset: int, total: int) -> Html:
    """Links to the previous and next page of a list, its filters kept."""
    from urllib.parse import urlencode

    def at(start: int) -> str:
        query = {k: v for k, v in request.query_params.items() if k != "offset" and v}
        return f"{request.url.path}?{urlencode({**query, 'offset': start})}"

    links = []
    if offset > 0:
        links.append(link(at(max(0, offset - RECIPES_PER_PAGE)), "previous"))
    if offset + RECIPES_PER_PAGE < total:
        links.append(link(at(offset + RECIPES_PER_PAGE), "next"))
    return tag("p", Html(" · ".join(links)), class_="pager")


@get("/sites", include_in_schema=False)
async def sites_page(ctx: Ctx, request: Request[Any, Any, Any]) -> Response[str]:
    def build(caller: Caller) -> Html:
        rows = []
        for name, facts in sorted(ctx.facts.sites.items()):
            if not caller.may_read_site(name):
                continue
            s = facts.summary()
            drift = (f"{len(s.drift.changes)} change(s) at {s.drift.at:%Y-%m-%d %H:%M}"
                     if s.drift else "none")
            rows.append((link(f"/sites/{name}", name), s.backend, ", ".join(s.capabilities),
                         tag("code", s.snapshot_digest[:12]),
                         f"{s.snapshot_at:%Y-%m-%d %H:%M:%S}" if s.snapshot_at else "",
                         drift, join(f"{r}: " + v + " " for r, v in s.validations.items())))
        return page("Sites", table(("site", "backend", "capabilities", "snapshot", "taken",
                                    "drift", "validations"), rows, id="sites"),
                    who=caller.name)
    return _render(ctx, request, build)


@get("/sites/{site:str}", include_in_schema=False)
async def site_page(ctx: Ctx, request: Request[Any, Any, Any], site: Segment) -> Response[str]:
    from datetime import UTC, datetime

    from cairn.evidence.status import eligibility

    try:
        caller = _caller(ctx, request)
    except PermissionDenied as exc:
        return _login(exc.message)
    facts = ctx.facts.sites.get(site)
    if facts is None or not caller.may_read_site(site):
        return _html(page("Not found", tag("p", f"no site {site}", class_="error"),
                          who=caller.name), 404)
    verdicts = await eligibility(ctx.bus, ctx.recipes.trust, now=datetime.now(UTC),
                                 max_age=None, site=site)
    s = facts.summary()
    changes = [(c.get("path", ""), c.get("before", ""), c.get("after", ""))
               for c in (s.drift.changes if s.drift else [])]
    rows = [(e.recipe, badge("CONFIRMED" if e.eligible else "FAILING"), e.reason, e.message)
            for e in verdicts if caller.may_read_evidence(e.site, e.recipe)]
    return _html(page(f"Site {site}", join([
        tag("p", f"backend {s.backend}; snapshot ", tag("code", s.snapshot_digest),
            f" ({s.nodes} node(s))"),
        tag("h2", "Drift"), table(("reading", "before", "after"), changes, id="drift"),
        tag("h2", "Eligibility"), table(("recipe", "eligible", "reason", "why"), rows,
                                        id="eligibility")]), who=caller.name))


@get("/evidence", include_in_schema=False)
async def evidence_page(ctx: Ctx, request: Request[Any, Any, Any]) -> Response[str]:
    def build(caller: Caller) -> Html:
        rows = [(e.site, e.recipe, badge(e.result or "UNTESTED"),
                 f"{e.validated_at:%Y-%m-%d %H:%M}" if e.validated_at else "",
                 link(f"/evidence/{e.bundle}", e.bundle[:16]))
                for e in reversed(ctx.facts.evidence)
                if caller.may_read_evidence(e.site, e.recipe)]
        return page("Evidence", table(("site", "recipe", "result", "validated", "bundle"),
                                      rows, id="evidence"), who=caller.name)
    return _render(ctx, request, build)


@get("/evidence/{bundle:str}", include_in_schema=False)
async def bundle_page(ctx: Ctx, request: Request[Any, Any, Any], bundle: Segment
                      ) -> Response[str]:
    try:
        caller = _caller(ctx, request)
    except PermissionDenied as exc:
        return _login(exc.message)
    try:
        result = await routes.evidence_verify.fn(ctx=ctx, caller=caller, bundle=bundle)
    except CairnError as exc:
        return _html(page("Not found", tag("p", exc.message, class_="error"),
                          who=caller.name), exc.http_status)
    rows = [(c.name, badge("CONFIRMED" if c.ok else "FAILING"), c.reason, c.message)
            for c in result.checks]
    return _html(page("Evidence bundle", join([
        tag("p", tag("code", bundle), " ", badge("CONFIRMED" if result.valid else "FAILING"),
            " signed by ", ", ".join(result.signers) or "no trusted signer"),
        table(("check", "passed", "reason", "detail"), rows, id="checks")]),
        who=caller.name))


PAGES: list[HTTPRouteHandler] = [login, overview, study_page, job_page, recipes_page,
                                 sites_page, site_page, evidence_page, bundle_page]
STATIC = create_static_files_router(path="/static", directories=[STATIC_DIR], name="static",
                                    include_in_schema=False)
