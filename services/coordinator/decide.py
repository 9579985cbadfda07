"""The coordinator's decisions: pure functions of state and the clock.

Decisions are level-triggered: `decide_job` looks at a job's folded state and returns the
events that move it on. Every event it returns has a deterministic id, so running it twice
(after a restart, or before its own last events came back) publishes nothing new: JetStream
drops the duplicate and the state check stops the rest.

How a job with a hub role (an FL job's server) ends: once the hub role exited 0 its work is
done, but the job is `completed` only when every worker has exited. The clients, told on the
data plane that training is over, normally exit at once; the coordinator records the wait
(`job.ending`), gives them the spec's `end_grace_s` from then, and only then stops those still
running, with reason `outlived-server` (the launcher reports that as their exit cause). A
worker whose end is never reported does not hold the job forever: `END_REPORT_S` after the
stop's own grace, the job completes regardless.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from cairn.coordinator.eligibility import EvidenceView, gated, receipt, refusal, unreachable
from cairn.events import (
    CancelCommand,
    DeployCommand,
    Deployment,
    Event,
    EventEnvelope,
    Heartbeat,
    JobAborted,
    JobCompleted,
    JobDispatched,
    JobEnding,
    JobFailed,
    JobQueued,
    JobRunning,
    JobUnschedulable,
    Resources,
    RoleRequest,
    event_envelope,
)
from cairn.spec.causes import Cause
from cairn.state.job import JobState, WorkerState
from cairn.state.study import StudyState

END_REPORT_S = 30.0
"""After a stop's own grace, how long a stopped worker's exit may take to be reported before
the job completes without it (a launcher that is down, a site that is slow to answer)."""
MAX_END_GRACE_S = 366 * 86400.0


@dataclass(frozen=True)
class SiteStatus:
    """What the coordinator knows of a site right now."""

    name: str
    online: bool
    free: Resources
    last_seen: datetime | None = None
    lost: bool = False


@dataclass(frozen=True)
class Context:
    now: datetime
    hub: str
    sites: Mapping[str, SiteStatus]
    cancel_grace_s: float = 10.0
    evidence: EvidenceView | None = None
    """Evidence and snapshots, for jobs that require a recipe (see eligibility.py)."""


def _base(job: JobState, what: str, ctx: Context, actor: str | None = None) -> EventEnvelope:
    """EventEnvelope of a decision: its id is `<job>.<what>`, the same every time it is made."""
    return event_envelope(f"coordinator@{ctx.hub}", id=f"{job.job}.{what}", at=ctx.now,
                    study=job.study, actor=actor, cause=job.spec.id)


_MEMBER_SETS: dict[int, tuple[tuple[str, ...], frozenset[str]]] = {}


def member_set(sites: tuple[str, ...]) -> frozenset[str]:
    """A study's sites as a set, made once per sites tuple (a study of 10,000 sites is
    otherwise scanned for each site a job names)."""
    hit = _MEMBER_SETS.get(id(sites))
    if hit is not None and hit[0] is sites:
        return hit[1]
    if len(_MEMBER_SETS) > 64:
        _MEMBER_SETS.clear()
    found = frozenset(sites)
    _MEMBER_SETS[id(sites)] = (sites, found)
    return found


def role_candidates(role: RoleRequest, study: StudyState, hub: str) -> list[str]:
    if role.placement == "hub":
        return [hub]
    if role.sites:
        members = member_set(study.sites)
        return [s for s in role.sites if s in members]
    return [s for s in study.sites if s != hub]


def role_need(role: RoleRequest, candidates: list[str]) -> int:
    if role.placement == "hub":
        return 1
    return role.min_sites if role.min_sites is not None else max(1, len(candidates))


def _why_not(site: SiteStatus | None, want: Resources, free: Resources) -> str:
    if site is None or not site.online:
        return "offline (no recent heartbeat)"
    return "not enough capacity: " + ", ".join(want.shortfall(free))


def schedule(job: JobState, study: StudyState, ctx: Context
             ) -> tuple[list[Deployment] | None, dict[str, str]]:
    """Place every role, or say per site why it cannot be placed yet."""
    # Only the candidates' capacity is looked at (ctx.sites may be thousands, judged lazily).
    free: dict[str, Resources] = {}
    deployments: list[Deployment] = []
    reasons: dict[str, str] = {}
    for role in job.spec.roles:
        candidates = role_candidates(role, study, ctx.hub)
        need = role_need(role, candidates)
        placed = 0
        for site in candidates:
            if gated(job, role) and (why := refusal(job, site, ctx.evidence, ctx.now)):
                reasons[site] = f"{role.name}: {why}"
                continue
            status = ctx.sites.get(site)
            avail = free.get(site, status.free if status is not None else Resources.zero())
            want = role.resources.times(role.nodes)
            if status is not None and status.online and want.fits_in(avail):
                free[site] = avail - want
                deployments.append(Deployment(site=site, role=role.name, rank=placed))
                placed += 1
            else:
                reasons[site] = f"{role.name}: {_why_not(status, want, avail)}"
        if placed < need:
            reasons.setdefault("*", f"{role.name}: {placed} of {need} sites available")
            return None, reasons
    return deployments, {}


def deploy_commands(job: JobState, deployments: list[Deployment], ctx: Context
                    ) -> list[Event]:
    roles = {r.name: r for r in job.spec.roles}
    peers = len(deployments)
    out: list[Event] = []
    for d in deployments:
        role = roles[d.role]
        base = _base(job, f"deploy.{d.site}.{d.role}.{d.rank}.{d.attempt}", ctx, job.actor)
        out.append(DeployCommand(**base, **d.worker(job.job).fields(),
                                 entrypoint=role.entrypoint, resources=role.resources,
                                 nodes=role.nodes,
                                 image=job.spec.image, code_digest=job.spec.code_digest,
                                 params=job.spec.params, timeout_s=job.spec.timeout_s,
                                 peers=peers,
                                 privacy=job.spec.workflow.privacy if job.spec.workflow
                                 else None,
                                 receipt=receipt(job, d.site, ctx.evidence, ctx.now)
                                 if gated(job, role) else None))
    return out


def _cancels(job: JobState, ctx: Context, reason: str, grace_s: float) -> list[Event]:
    sites = sorted({w.site for w in job.workers.values()
                    if w.state not in ("exited", "rejected")})
    return [CancelCommand(**_base(job, f"cancel.{site}", ctx), job=job.job,
                          site=site, reason=reason, grace_s=grace_s) for site in sites]


def _end(job: JobState, ctx: Context, kind: str, cause: str | None = None,
         message: str = "") -> Event:
    base = _base(job, "end", ctx)
    if kind == "completed":
        return JobCompleted(**base, job=job.job)
    if kind == "aborted":
        return JobAborted(**base, job=job.job, reason=cause or "cancelled", message=message)
    return JobFailed(**base, job=job.job, reason=cause or "infrastructure", message=message)


def _failed(w: WorkerState, ctx: Context) -> bool:
    if w.failed:
        return True
    site = ctx.sites.get(w.site)
    return w.state not in ("exited", "rejected") and (site is None or site.lost)


def _role_verdict(job: JobState, role: RoleRequest, ctx: Context) -> tuple[str, str | None, str]:
    """('ok' | 'running' | 'failed', cause, message) for one role."""
    workers = [w for w in job.workers.values() if w.role == role.name]
    if not workers:
        return "ok", None, ""
    total = len(workers)
    need = 1 if role.placement == "hub" else (role.min_sites or total)
    failed = [w for w in workers if _failed(w, ctx)]
    done_ok = [w for w in workers if w.state == "exited" and w.exit_code == 0]
    if total - len(failed) < need:
        first = sorted(failed, key=lambda w: (w.updated_at or ctx.now, w.key))[0]
        cause = first.cause or ("site-lost" if not first.failed else "crashed")
        rejected = [w for w in failed if w.state == "rejected"]
        if rejected:
            cause = rejected[0].cause or "site-policy"
            first = rejected[0]
        elif cause not in ("timeout", "cancelled") and role.min_sites is not None:
            # The job spec asked to tolerate losses down to min_sites: going below is the
            # job's failure, whatever killed the last worker.
            cause = "too-few-sites"
        detail = first.message or (f"exit code {first.exit_code}"
                                   if first.exit_code is not None else cause)
        message = (f"{role.name} at {first.site}: {detail}"
                   + (f" ({total - len(failed)} of {need} needed remain)"
                      if cause == "too-few-sites" else ""))
        return "failed", cause, message
    if all(w.state in ("exited", "rejected") or _failed(w, ctx) for w in workers):
        return ("ok" if len(done_ok) >= need else "failed"), None, ""
    return "running", None, ""


def decide_job(job: JobState, study: StudyState | None, ctx: Context) -> list[Event]:
    """The events that move `job` on, given the sites as they are now."""
    if job.terminal:
        return []
    now = ctx.now
    if job.cancel_requested:
        if job.dispatched_at is None:
            return [_end(job, ctx, "aborted", "cancelled", "cancelled before dispatch")]
        live = [w for w in job.workers.values() if w.state not in ("exited", "rejected")
                and not _failed(w, ctx)]
        if not live:
            return [_end(job, ctx, "aborted", "cancelled", "cancelled")]
        return _cancels(job, ctx, "cancelled", ctx.cancel_grace_s)
    if job.state in ("submitted", "queued"):
        return _decide_pending(job, study, ctx)
    out: list[Event] = []
    if job.state == "dispatched" and any(w.state in ("running", "exited")
                                         for w in job.workers.values()):
        out.append(JobRunning(**_base(job, "running", ctx), job=job.job))
    if job.hub_finished:
        # Before the timeout: the server's result stands, and the wait is bounded by the
        # end grace anyway.
        return [*out, *_ending(job, ctx)]
    started = job.dispatched_at or job.submitted_at
    if now - started > timedelta(seconds=job.spec.timeout_s):
        return [_end(job, ctx, "failed", "timeout",
                     f"job ran past its timeout of {job.spec.timeout_s:g}s"),
                *_cancels(job, ctx, "timeout", ctx.cancel_grace_s)]
    verdicts = [(_role_verdict(job, r, ctx), r) for r in job.spec.roles]
    for (verdict, cause, message), _role in verdicts:
        if verdict == "failed":
            return [*out, _end(job, ctx, "failed", cause or "crashed", message),
                    *_cancels(job, ctx, "job failed", ctx.cancel_grace_s)]
    if all(v[0] == "ok" for v, _ in verdicts):
        # Every role has its workers' verdict; any still listed as live is on a lost site.
        return [*out, _end(job, ctx, "completed"),
                *_cancels(job, ctx, "job completed", ctx.cancel_grace_s)]
    return out


def end_grace_s(job: JobState) -> float:
    """The job's end grace in seconds, within bounds whatever a request carried."""
    grace = float(job.spec.end_grace_s)
    return min(grace, MAX_END_GRACE_S) if math.isfinite(grace) and grace >= 0 else 0.0


def _ending(job: JobState, ctx: Context) -> list[Event]:
    """The hub role finished: wait for the other workers, stop those past the end grace."""
    live = [w for w in job.still_running() if not _failed(w, ctx)]
    if not live:
        return [_end(job, ctx, "completed")]
    grace = end_grace_s(job)
    if job.ending_at is None:
        return [JobEnding(**_base(job, "ending", ctx), job=job.job, end_grace_s=grace,
                          waiting=[w.key for w in live])]
    waited = (ctx.now - job.ending_at).total_seconds()
    if waited < grace:
        return []
    if waited < grace + ctx.cancel_grace_s + END_REPORT_S:
        reason = str(Cause.OUTLIVED_SERVER)
        return [CancelCommand(**_base(job, f"cancel.{site}.{reason}", ctx), job=job.job,
                              site=site, reason=reason, grace_s=ctx.cancel_grace_s)
                for site in sorted({w.site for w in live})]
    return [_end(job, ctx, "completed")]


def _decide_pending(job: JobState, study: StudyState | None, ctx: Context) -> list[Event]:
    now = ctx.now
    if study is None:
        return [_end(job, ctx, "failed", "unschedulable", "the study does not exist")]
    if study.held:
        if job.state != "submitted":
            return []
        why = f"the study's queue is held{': ' + study.hold_reason if study.hold_reason else ''}"
        return [JobQueued(**_base(job, "queued", ctx), job=job.job, reasons={"study": why})]
    if job.spec.requires is not None:
        candidates = {r.name: role_candidates(r, study, ctx.hub) for r in job.spec.roles}
        needs = {r.name: role_need(r, candidates[r.name]) for r in job.spec.roles}
        if (blocked := unreachable(job, candidates, needs, ctx.evidence, now)) is not None:
            return [JobUnschedulable(**_base(job, "end", ctx), job=job.job, reasons=blocked)]
    deployments, reasons = schedule(job, study, ctx)
    if deployments is not None:
        dispatched = JobDispatched(**_base(job, "dispatched", ctx), job=job.job,
                                   deployments=deployments)
        return [dispatched, *deploy_commands(job, deployments, ctx)]
    queued_since = max(job.submitted_at, study.released_at or job.submitted_at)
    if now - queued_since > timedelta(seconds=job.spec.queue_timeout_s):
        base = _base(job, "end", ctx)
        return [JobUnschedulable(**base, job=job.job, reasons=reasons)]
    if job.state == "submitted":
        return [JobQueued(**_base(job, "queued", ctx), job=job.job, reasons=reasons)]
    return []


def site_status(hb: Heartbeat | None, seen: datetime | None, now: datetime, *,
                stale_s: float, lost_s: float, name: str, since: datetime) -> SiteStatus:
    """A site is online while its heartbeats are fresh, and lost once none came for `lost_s`
    (counted from `since`, the coordinator's start, for a site it has not heard yet)."""
    if hb is None or seen is None:
        waited = (now - since).total_seconds()
        return SiteStatus(name=name, online=False, free=Resources.zero(),
                          lost=waited > lost_s)
    age = (now - max(seen, since)).total_seconds()
    return SiteStatus(name=name, online=(now - seen).total_seconds() <= stale_s, free=hb.free,
                      last_seen=seen,
                      lost=age > lost_s)
