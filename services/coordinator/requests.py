"""The coordinator's answers to `cairn.api.*` requests (see `cairn.api` for the contract)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

import msgspec

from cairn import api
from cairn.client.jobrequest import JobRequest
from cairn.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from cairn.events import (
    JobCancelRequested,
    JobSubmitted,
    StudyAdmin,
    StudyAdminAdded,
    StudyAdminRemoved,
    StudyCreated,
    StudySiteAdded,
    StudySiteRemoved,
    stamp,
)
from cairn.names import check_name, new_job_id
from cairn.spec.roles import allowed
from cairn.state import study as study_state
from cairn.state.job import JobState
from cairn.state.study import StudyState

if TYPE_CHECKING:
    from cairn.coordinator.service import CoordinatorService

SOURCE = "coordinator@hub"


class _Envelope(TypedDict):
    id: str
    at: datetime
    source: str
    study: str
    actor: str | None


def _arg(args: dict[str, Any], key: str) -> Any:
    if key not in args:
        raise InvalidInput(f"missing argument {key!r}", field=key)
    return args[key]


class Requests:
    """Request handlers; state lives in the service, these only read it and publish."""

    def __init__(self, service: CoordinatorService) -> None:
        self.svc = service

    # -- who may act ------------------------------------------------------------------

    def role_of(self, actor: str | None, study: StudyState | None) -> tuple[str, str]:
        """(role, org) of an actor: a federation project_admin acts everywhere."""
        if not actor:
            raise PermissionDenied("no actor given: pass --actor or set CAIRN_ACTOR "
                                   "(taken on trust until the security work lands)")
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

    # -- federation verbs -------------------------------------------------------------

    async def fed(self, verb: str, req: api.Request) -> Any:
        svc = self.svc
        if verb == "federation":
            return svc.federation_info()
        if verb == "site-list":
            return svc.site_infos(None)
        if verb == "study-list":
            return [v.study for v in svc.views.values() if v.study is not None]
        if verb == "study-create":
            role, _ = self.role_of(req.actor, None)
            if not allowed(role, "create-study"):
                raise PermissionDenied(f"{req.actor} may not create studies")
            name = check_name(_arg(req.args, "name"), "study")
            if name in svc.views and svc.views[name].study is not None:
                raise Conflict(f"study {name} already exists", field="name")
            sites = [check_name(s, "site") for s in req.args.get("sites", [])]
            unknown = [s for s in sites if s not in svc.fed_sites]
            if unknown:
                raise InvalidInput(f"not sites of this federation: {', '.join(unknown)}",
                                   field="sites")
            admins = msgspec.convert(req.args.get("admins", []), list[StudyAdmin])
            event = StudyCreated(**stamp(), source=SOURCE, study=name, actor=req.actor,
                                 name=name, sites=sites, admins=admins,
                                 description=str(req.args.get("description", "")))
            await svc.open_study(name)
            await svc.bus.publish(event)
            return study_state.apply(None, event)
        raise NotFound(f"unknown verb {verb!r}; known: {', '.join(api.FED_VERBS)}")

    # -- study verbs ------------------------------------------------------------------

    async def study(self, study_name: str, verb: str, req: api.Request) -> Any:
        svc = self.svc
        view = svc.views.get(study_name)
        study = view.study if view else None
        if view is None or study is None:
            raise NotFound(f"study {study_name} not found")
        role, org = self.role_of(req.actor, study)
        if verb == "show":
            return study
        if verb == "sites":
            return svc.site_infos(study)
        if verb == "site":
            name = check_name(_arg(req.args, "site"), "site")
            if name not in study.sites:
                raise NotFound(f"site {name} not found in study {study_name}")
            return svc.site_infos(study, only=name)[0]
        if verb == "jobs":
            state = req.args.get("state")
            jobs = sorted(view.jobs.values(), key=lambda j: j.submitted_at)
            return [j for j in jobs if state is None or j.state == state]
        if verb == "job":
            return self._job(study_name, req)
        if verb == "submit":
            if not allowed(role, "submit"):
                raise PermissionDenied(f"{req.actor} ({role}) may not submit jobs")
            return await self._submit(study, req)
        if verb == "cancel":
            job = self._job(study_name, req)
            own = job.actor == req.actor
            same_org = bool(org) and self.org_of(job.actor) == org
            if not allowed(role, "cancel", own=own, same_org=same_org):
                raise PermissionDenied(f"{req.actor} ({role}) may not cancel {job.job}")
            if job.terminal:
                return {"job": job.job, "state": job.state}
            seq = await svc.bus.publish(JobCancelRequested(
                id=f"{job.job}.cancel-requested", at=stamp()["at"], source=SOURCE,
                study=study_name, actor=req.actor, job=job.job))
            await svc.wait_applied(study_name, seq)
            return {"job": job.job, "state": "cancelling"}
        if verb in ("add-site", "remove-site", "add-admin", "remove-admin"):
            return await self._manage(study, verb, role, org, req)
        raise NotFound(f"unknown verb {verb!r}; known: {', '.join(api.STUDY_VERBS)}")

    def _job(self, study_name: str, req: api.Request) -> JobState:
        job_id = _arg(req.args, "job")
        # A job of another study is simply not here: study isolation.
        job = self.svc.views[study_name].jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise NotFound(f"job {job_id} not found in study {study_name}", field="job")
        return job

    async def _submit(self, study: StudyState, req: api.Request) -> Any:
        try:
            request = msgspec.convert(_arg(req.args, "spec"), JobRequest)
        except msgspec.ValidationError as exc:
            raise InvalidInput(f"bad job request: {exc}", field="spec") from None
        check_name(request.name, "job name")
        if not request.roles:
            raise InvalidInput("a job needs at least one role", field="roles")
        for role in request.roles:
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
        event = JobSubmitted(**stamp(), source=SOURCE, study=study.name, actor=req.actor,
                             job=job_id, **msgspec.structs.asdict(request))
        seq = await self.svc.bus.publish(event)
        await self.svc.wait_applied(study.name, seq)
        return {"job": job_id}

    async def _manage(self, study: StudyState, verb: str, role: str, org: str,
                      req: api.Request) -> Any:
        svc = self.svc
        base = _Envelope(**stamp(), source=SOURCE, study=study.name, actor=req.actor)
        event: Any
        if verb in ("add-site", "remove-site"):
            site = check_name(_arg(req.args, "site"), "site")
            if site not in svc.fed_sites:
                raise NotFound(f"site {site} is not a site of this federation", field="site")
            if not allowed(role, "manage-study", same_org=svc.fed_sites[site] == org):
                raise PermissionDenied(f"{req.actor} ({role}) may not change {site}")
            if verb == "add-site":
                if site in study.sites:
                    raise Conflict(f"site {site} is already in study {study.name}")
                event = StudySiteAdded(**base, site=site)
            else:
                if site not in study.sites:
                    raise NotFound(f"site {site} is not in study {study.name}")
                event = StudySiteRemoved(**base, site=site)
        elif verb == "add-admin":
            try:
                admin = msgspec.convert({"name": _arg(req.args, "name"),
                                         "org": _arg(req.args, "org"),
                                         "role": req.args.get("role", "member")}, StudyAdmin)
            except msgspec.ValidationError as exc:
                raise InvalidInput(f"bad admin: {exc}", field="role") from None
            if not allowed(role, "manage-study", same_org=admin.org == org):
                raise PermissionDenied(f"{req.actor} ({role}) may not add {admin.name}")
            event = StudyAdminAdded(**base, admin=admin)
        else:
            name = str(_arg(req.args, "name"))
            target = study.admins.get(name)
            if target is None:
                raise NotFound(f"{name} is not an admin of study {study.name}")
            if not allowed(role, "manage-study", same_org=target.org == org):
                raise PermissionDenied(f"{req.actor} ({role}) may not remove {name}")
            event = StudyAdminRemoved(**base, name=name)
        seq = await svc.bus.publish(event)
        await svc.wait_applied(study.name, seq)
        return study_state.apply(study, event)
