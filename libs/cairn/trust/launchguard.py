"""The launcher's own check of a launch request, so that even an authenticated agent (or
anyone who could write on the site's launch subject) cannot make it run something the site
did not accept.

A launch may use only what the site's own study_runtime.yaml gives the study, by name and
with the same source: datasets, secrets, environment, platform settings and an approved
image. Everything else it runs must be the coordinator's deploy command for that very launch
id, exactly: the worker's identity (job, site, role, rank, attempt), entrypoint, code, image,
params, timeout, resources and nodes. The launcher finds that command by the launch id, and
uses it once.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cairn.errors import PermissionDenied
from cairn.events import DeployCommand, LaunchRequested
from cairn.spec.policy import image_approved
from cairn.spec.runtime import StudyPolicy, StudyRuntime
from cairn.state.launch import make_launch_id

PLATFORMS = ("docker", "kubernetes", "slurm")
"""The per-backend sections of a study's policy that travel to the launcher as `platform`."""


def platform_settings(policy: StudyPolicy) -> dict[str, Any]:
    """The platform settings a launch of the study carries: its policy's backend sections."""
    return {key: value for key in PLATFORMS if (value := getattr(policy, key)) is not None}


def check_against_runtime(req: LaunchRequested, runtime: StudyRuntime) -> StudyPolicy:
    """The study's policy, unless the request names a site resource that is not its own.

    Raises:
        PermissionDenied: naming the field that is not the runtime file's.
    """
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
    if _builtins(req.platform) != _builtins(platform_settings(policy)):
        raise PermissionDenied(f"the platform settings are not this site's for study {study}",
                               field="platform")
    if req.image or policy.images.approved:
        ok, why = image_approved(req.image, policy)
        if not ok and req.image != policy.images.default:
            raise PermissionDenied(f"image {req.image!r} is not approved here: {why}",
                                   field="image")
    return policy


def check_against_deploy(req: LaunchRequested, deploy: DeployCommand, *,
                         default_image: str | None) -> None:
    """Raise unless the request runs exactly what `deploy`, the deploy command found by the
    request's launch id, said.

    `default_image` is the study's default at this site (the agent's choice when the job
    names none).

    Raises:
        PermissionDenied: naming the first field that differs.
    """
    expected_id = make_launch_id(deploy.job, deploy.site, deploy.role, deploy.rank,
                                 deploy.attempt)
    asked: tuple[tuple[str, object, object], ...] = (
        ("launch_id", req.launch_id, expected_id),
        ("study", req.study, deploy.study),
        ("job", req.job, deploy.job),
        ("site", req.site, deploy.site),
        ("role", req.role, deploy.role),
        ("rank", req.rank, deploy.rank),
        ("attempt", req.attempt, deploy.attempt),
        ("entrypoint", req.entrypoint, deploy.entrypoint),
        ("code_digest", req.code_digest, deploy.code_digest),
        ("image", req.image, deploy.image or default_image),
        ("params", _builtins(req.params), _builtins(deploy.params)),
        ("timeout_s", req.timeout_s, deploy.timeout_s),
        ("resources", req.resources, deploy.resources),
        ("nodes", req.nodes, deploy.nodes),
    )
    for field, got, want in asked:
        if got != want:
            raise PermissionDenied(f"the launch request's {field} is not its deploy "
                                   f"command's", field=field)
    # The agent picks the GPU ids (it owns allocations); the job decided how many.
    if len(set(req.gpus)) != len(req.gpus) or len(req.gpus) > deploy.resources.gpus:
        raise PermissionDenied(f"the launch request holds {len(req.gpus)} GPU(s); its deploy "
                               f"command asked for {deploy.resources.gpus}", field="gpus")


def _builtins(value: object) -> object:
    """As the wire carries it (JSON: Structs as objects, tuples as lists), so a value decoded
    from the wire equals the Structs it was made of."""
    return msgspec.json.decode(msgspec.json.encode(value))
