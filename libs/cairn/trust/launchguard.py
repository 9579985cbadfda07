"""The launcher's own check of a launch request, so that even an authenticated agent (or
anyone who could write on the site's launch subject) cannot make it run something the site
did not accept.

A launch may use only what the site's own study_runtime.yaml gives the study, by name and
with the same source: datasets, secrets, environment and an approved image. Its entrypoint,
image and code must be those of the coordinator's deploy command for that very worker.
"""

from __future__ import annotations

from cairn.errors import PermissionDenied
from cairn.events import DeployCommand, LaunchRequested
from cairn.spec.policy import image_approved
from cairn.spec.runtime import StudyRuntime


def check_against_runtime(req: LaunchRequested, runtime: StudyRuntime) -> None:
    """Raise unless every site resource the request names is the runtime file's own."""
    study = req.study or ""
    policy = runtime.studies.get(study)
    if policy is None:
        raise PermissionDenied(f"study {study!r} is not in this site's study_runtime.yaml",
                               field="study")
    for name, mount in req.datasets.items():
        own = policy.datasets.get(name)
        if own is None or own.source != mount.source or own.mode != mount.mode:
            raise PermissionDenied(f"dataset {name!r} ({mount.source}) is not this site's "
                                   f"dataset of that name for study {study}",
                                   field=f"datasets.{name}")
    for name, ref in req.secret_refs.items():
        own_ref = policy.secret_env.get(name)
        if own_ref is None or own_ref.source != ref:
            raise PermissionDenied(f"secret {name!r} is not this site's secret of that name "
                                   f"for study {study}", field=f"secret_env.{name}")
    for key, value in req.env.items():
        if policy.env.get(key) != value:
            raise PermissionDenied(f"env {key} is not this site's setting for study {study}",
                                   field=f"env.{key}")
    if req.image or policy.images.approved:
        ok, why = image_approved(req.image, policy)
        if not ok and req.image != policy.images.default:
            raise PermissionDenied(f"image {req.image!r} is not approved here: {why}",
                                   field="image")


def check_against_deploy(req: LaunchRequested, deploy: DeployCommand | None) -> None:
    """Raise unless the request runs what the coordinator's deploy command said."""
    if deploy is None:
        raise PermissionDenied(f"no deploy command for {req.launch_id}: the launch was not "
                               "accepted for this job", field="launch_id")
    if req.entrypoint != deploy.entrypoint:
        raise PermissionDenied("the entrypoint is not the job's", field="entrypoint")
    if deploy.image and req.image != deploy.image:
        raise PermissionDenied("the image is not the job's", field="image")
    if req.code_digest != deploy.code_digest:
        raise PermissionDenied("the code bundle is not the job's", field="code_digest")


def matches(deploy: DeployCommand, req: LaunchRequested) -> bool:
    return (deploy.job, deploy.site, deploy.role, deploy.rank, deploy.attempt) == \
        (req.job, req.site, req.role, req.rank, req.attempt)
