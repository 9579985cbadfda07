"""The coordinator's answers to `cairn.api.fed.*` and `cairn.api.study.<study>.*` requests.

Each request arrives decoded once (`cairn.api.Envelope`, checked against its subject by the
runtime) and is dispatched with `match`; each answer is a typed `cairn.api` result. Handlers
read the service's state, decide, and publish; they never change state themselves (the
coordinator's fold does, when the published event comes back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast, get_args

from cairn import api, subjects
from cairn.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from cairn.events import (
    EventEnvelope,
    JobCancelRequested,
    JobSubmitted,
    StudyAdmin,
    StudyAdminAdded,
    StudyAdminRemoved,
    StudyCreated,
    StudyHold,
    StudySiteAdded,
    StudySiteRemoved,
    event_envelope,
)
from cairn.events.base import Event
from cairn.events.study import Role
from cairn.names import check_name, new_job_id
from cairn.spec.roles import Action, allowed
from cairn.state import study as study_state
from cairn.state.job import JobState
from cairn.state.study import StudyState
from cairn.subjects import ApiAddress
from cairn.trust.requests import RAW_REQUEST, BucketNonces, RequestVerifier

if TYPE_CHECKING:
    from cairn.coordinator.service import CoordinatorService


class Requests:
    """Request handlers; state lives in the service, these only read it and publish."""

    def __init__(self, service: CoordinatorService) -> None:
        self.svc = service
        self._verifier: RequestVerifier | None = None

    @property
    def source(self) -> str:
        return f"coordinator@{self.svc.hub}"

    # -- who may act ------------------------------------------------------------------

    def role_of(self, actor: str | None, study: StudyState | None) -> tuple[str, str]:
        """(role, org) of an actor: a federation project_admin acts everywhere."""
        if not actor:
            raise PermissionDenied("no actor given: pass --actor or set CAIRN_ACTOR")
        fed_admin = self.svc.admins.get(actor)
        if fed_admin is not None and fed_admin.role == "project_admin":
            return "project_admin", fed_admin.org
        if study is not None and actor in study.admins:
            admin = study.admins[actor]
            return admin.role, admin.org
        raise PermissionDenied(f"{actor} is not an admin of "
                               f"{'study ' + study.name if study else 'this federation'}")

    def org_of(self, actor: str | None) -> str:
        if actor is None:
            return ""
        admin = self.svc.admins.get(actor)
        if admin:
            return admin.org
        for view in self.svc.views.values():
            if view.study and actor in view.study.admins:
                return view.study.admins[actor].org
        return ""

    def studies_of(self, actor: str | None) -> list[StudyState]:
        """The studies an actor belongs to (every study, for a project admin)."""
        studies = [v.study for v in self.svc.views.values() if v.study is not None]
        fed_admin = self.svc.admins.get(actor or "")
        if fed_admin is not None and fed_admin.role == "project_admin":
            return studies
        return [s for s in studies if actor and actor in s.admins]

    # -- dispatch ---------------------------------------------------------------------

    async def handle(self, envelope: api.Envelope, address: ApiAddress) -> api.Result:
        """Answer one request (federation verbs, or study verbs of `address.study`)."""
        envelope = await self._verified(envelope, address)
        if address.scope == "study":
            assert address.study is not None
            return await self._study(address.study, envelope)
        if address.scope == "fed":
            return await self._fed(envelope)
        raise NotFound(f"the coordinator does not serve {address.scope} requests")

    async def _verified(self, envelope: api.Envelope, address: ApiAddress) -> api.Envelope:
        """In a secure federation, the envelope as signed, its actor the verified signer,
        its nonce recorded in KV `nonces` (`cairn.trust.requests`); otherwise the actor is
        taken on trust."""
        creds = self.svc.config.creds
        if not creds:
            return envelope
        if self._verifier is None:
            self._verifier = RequestVerifier.from_kit(
                creds, BucketNonces(self.svc.bus, subjects.KV_NONCES))
        raw = RAW_REQUEST.get()
        if raw is None:
            raise PermissionDenied("the request's bytes are not at hand, so its signature "
                                   "cannot be checked", field="signature")
        return await self._verifier.verify(raw, envelope, study=address.study)

    async def _fed(self, envelope: api.Envelope) -> api.Result:
        svc = self.svc
        match envelope.request:
            case api.FederationShow():
                return api.FederationResult(federation=svc.federation_info())
            case api.SiteList():
                return api.SitesResult(sites=svc.site_infos(None))
            case api.StudyList():
                return api.StudiesResult(studies=self.studies_of(envelope.actor))
            case api.StudyCreate() as req:
                return api.StudyResult(study=await self._create_study(envelope.actor, req))
            case other:
                raise NotFound(f"{api.verb_of(other)!r} is not a federation verb")

    async def _study(self, study_name: str, envelope: api.Envelope) -> api.Result:
        svc = self.svc
        view = svc.views.get(study_name)
        study = view.study if view else None
        if view is None or study is None:
            raise NotFound(f"study {study_name} not found")
        actor = envelope.actor
        role, org = self.role_of(actor, study)
        match envelope.request:
            case api.StudyShow():
                return api.StudyResult(study=study)
            case api.StudySites():
                return api.SitesResult(sites=svc.site_infos(study))
            case api.StudySite(site=site):
                name = check_name(site, "site")
                if name not in study.sites:
                    raise NotFound(f"site {name} not found in study {study_name}", field="site")
                return api.SiteResult(site=svc.site_infos(study, only=name)[0])
            case api.JobList(state=state):
                jobs = sorted(view.jobs.values(), key=lambda j: j.submitted_at)
                return api.JobsResult(jobs=[j for j in jobs if state is None or j.state == state])
            case api.JobShow(job=job_id):
                return api.JobResult(job=self._job(study_name, job_id))
            case api.Submit(spec=spec):
                if not allowed(role, Action.SUBMIT):
                    raise PermissionDenied(f"{actor} ({role}) may not submit jobs")
                return api.Submitted(job=await self._submit(study, actor, spec))
            case api.JobCancel(job=job_id):
                return await self._cancel(study_name, actor, role, org, job_id)
            case api.StudyAddSite(site=site):
                site = self._fed_site(site)
                self._may_manage(actor, role, org, svc.fed_sites[site], site)
                if site in study.sites:
                    raise Conflict(f"site {site} is already in study {study.name}")
                return await self._change(study, StudySiteAdded(
                    **self._base(study, actor), site=site))
            case api.StudyRemoveSite(site=site):
                site = self._fed_site(site)
                self._may_manage(actor, role, org, svc.fed_sites[site], site)
                if site not in study.sites:
                    raise NotFound(f"site {site} is not in study {study.name}", field="site")
                return await self._change(study, StudySiteRemoved(
                    **self._base(study, actor), site=site))
            case api.StudySetHold(held=held, reason=reason):
                if not allowed(role, Action.MANAGE_STUDY):  # study-wide: project admins
                    raise PermissionDenied(f"{actor} ({role}) may not hold or release the "
                                           f"queue of study {study.name}")
                if held == study.held:
                    return api.StudyResult(study=study)  # held or released already
                return await self._change(study, StudyHold(
                    **self._base(study, actor), held=held, reason=reason[:500]))
            case api.StudyAddAdmin(name=name, org=admin_org, role=admin_role):
                admin = StudyAdmin(name=name, org=admin_org, role=_admin_role(admin_role))
                self._may_manage(actor, role, org, admin.org, admin.name)
                return await self._change(study, StudyAdminAdded(
                    **self._base(study, actor), admin=admin))
            case api.StudyRemoveAdmin(name=name):
                target = study.admins.get(name)
                if target is None:
                    raise NotFound(f"{name} is not an admin of study {study.name}", field="name")
                self._may_manage(actor, role, org, target.org, name)
                return await self._change(study, StudyAdminRemoved(
                    **self._base(study, actor), name=name))
            case other:
                raise NotFound(f"{api.verb_of(other)!r} is not a study verb")

    # -- verbs ------------------------------------------------------------------------

    async def _create_study(self, actor: str | None, req: api.StudyCreate) -> StudyState:
        svc = self.svc
        role, _ = self.role_of(actor, None)
        if not allowed(role, Action.CREATE_STUDY):
            raise PermissionDenied(f"{actor} may not create studies")
        name = check_name(req.name, "study")
        if name in svc.views and svc.views[name].study is not None:
            raise Conflict(f"study {name} already exists", field="name")
        sites = [check_name(s, "site") for s in req.sites]
        unknown = [s for s in sites if s not in svc.fed_sites]
        if unknown:
            raise InvalidInput(f"not sites of this federation: {', '.join(unknown)}",
                               field="sites")
        admins = [StudyAdmin(name=a.name, org=a.org, role=_admin_role(a.role))
                  for a in req.admins]
        event = StudyCreated(**event_envelope(self.source, study=name, actor=actor), name=name,
                             sites=sites, admins=admins, description=req.description)
        await svc.open_study(name)
        await svc.publish(event)
        created = study_state.apply(None, event)
        assert created is not None
        return created

    def _job(self, study_name: str, job_id: str) -> JobState:
        # A job of another study is simply not here: study isolation.
        job = self.svc.views[study_name].jobs.get(job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found in study {study_name}", field="job")
        return job

    async def _submit(self, study: StudyState, actor: str | None, spec: api.JobRequest) -> str:
        check_name(spec.name, "job name")
        if not spec.roles:
            raise InvalidInput("a job needs at least one role", field="roles")
        for role in spec.roles:
            check_name(role.name, "role")
            for site in role.sites or []:
                check_name(site, "site")
                if site not in study.sites:
                    raise InvalidInput(f"site {site} is not in study {study.name}",
                                       field=f"roles.{role.name}.sites")
            if role.placement == "hub" and self.svc.hub not in study.sites:
                raise InvalidInput(f"role {role.name} runs on the hub ({self.svc.hub}), "
                                   f"which is not in study {study.name}",
                                   field=f"roles.{role.name}")
        job_id = new_job_id()
        fields = {name: getattr(spec, name) for name in spec.__struct_fields__}
        event = JobSubmitted(**event_envelope(self.source, study=study.name, actor=actor),
                             job=job_id, **fields)
        seq = await self.svc.publish(event)
        await self.svc.wait_applied(study.name, seq)
        return job_id

    async def _cancel(self, study_name: str, actor: str | None, role: str, org: str,
                      job_id: str) -> api.CancelAccepted:
        job = self._job(study_name, job_id)
        own = job.actor == actor
        same_org = bool(org) and self.org_of(job.actor) == org
        if not allowed(role, Action.CANCEL, own=own, same_org=same_org):
            raise PermissionDenied(f"{actor} ({role}) may not cancel {job.job}")
        if job.terminal:
            return api.CancelAccepted(job=job.job, state=job.state)
        seq = await self.svc.publish(JobCancelRequested(
            **event_envelope(self.source, id=f"{job.job}.cancel-requested", study=study_name,
                       actor=actor), job=job.job))
        await self.svc.wait_applied(study_name, seq)
        return api.CancelAccepted(job=job.job, state="cancelling")

    # -- study changes ----------------------------------------------------------------

    def _fed_site(self, site: str) -> str:
        name = check_name(site, "site")
        if name not in self.svc.fed_sites:
            raise NotFound(f"site {name} is not a site of this federation", field="site")
        return name

    def _may_manage(self, actor: str | None, role: str, org: str, target_org: str,
                    target: str) -> None:
        if not allowed(role, Action.MANAGE_STUDY, same_org=target_org == org):
            raise PermissionDenied(f"{actor} ({role}) may not change {target}")

    def _base(self, study: StudyState, actor: str | None) -> EventEnvelope:
        return event_envelope(self.source, study=study.name, actor=actor)

    async def _change(self, study: StudyState, event: Event) -> api.StudyResult:
        seq = await self.svc.publish(event)
        await self.svc.wait_applied(study.name, seq)
        changed = study_state.apply(study, event)
        assert changed is not None
        return api.StudyResult(study=changed)


def _admin_role(role: str) -> Role:
    """An admin role as the events hold it; anything else is refused, naming the field."""
    if role not in get_args(Role):
        raise InvalidInput(f"unknown admin role {role!r}: use {', '.join(get_args(Role))}",
                           field="role")
    return cast(Role, role)
