"""The job request a client sends with `submit` (`cairn.api.JobRequest`): exactly the
job-request fields of `job.submitted`, so the coordinator adds id, time and actor.

Built from a parsed job spec (`cairn job submit`) or from a recorded `JobSubmitted`
(`cairn job rerun`, which keeps the code digest and sets `rerun_of`).
"""

from __future__ import annotations

from cairn.api import JobRequest

__all__ = ["REQUEST_FIELDS", "JobRequest", "request_of_spec", "request_of_submitted"]
from cairn.events import JobSubmitted, RecipeRequirement, Resources, RoleRequest
from cairn.spec.job import JobSpec

REQUEST_FIELDS: tuple[str, ...] = JobRequest.__struct_fields__
"""The fields `job.submitted` shares with the request (a unit test holds the two together)."""


def request_of_spec(spec: JobSpec, code_digest: str | None) -> JobRequest:
    """The request for a parsed job spec whose code was uploaded as `code_digest`."""
    roles = [
        RoleRequest(
            name=name,
            entrypoint=role.entrypoint,
            placement=role.placement,
            resources=Resources(
                gpus=role.resources.gpus,
                millicpus=role.resources.millicpus,
                memory_bytes=role.resources.memory_bytes,
            ),
            # RoleRequest says "all of the study's sites" with None.
            sites=None if role.sites == "all" else list(role.sites),
            min_sites=role.min_sites,
            nodes=role.nodes,
        )
        for name, role in spec.roles.items()
    ]
    requires = None
    if spec.requires is not None:
        requires = RecipeRequirement(recipe=spec.requires.recipe, max_age_s=spec.requires.max_age_s,
                                     signers=list(spec.requires.signers))
    return JobRequest(
        name=spec.name,
        roles=roles,
        code_digest=code_digest,
        image=spec.image,
        params=dict(spec.params),
        timeout_s=float(spec.timeout_s),
        retries=spec.retries,
        queue_timeout_s=float(spec.queue_timeout_s),
        end_grace_s=float(spec.end_grace_s),
        requires=requires,
        workflow=spec.workflow,
    )


def request_of_submitted(submitted: JobSubmitted, *, rerun_of: str | None) -> JobRequest:
    """The recorded request of a job, to submit it again."""
    fields = {f: getattr(submitted, f) for f in REQUEST_FIELDS}
    fields["rerun_of"] = rerun_of
    return JobRequest(**fields)
