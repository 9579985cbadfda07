"""The site's policy decisions, as pure functions the agent calls before it accepts a job.

Capacity (is there room now?) is the agent's business and leads to queueing; these decide
whether the study may have the deployment at all, and return a cause from the closed set.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

import msgspec

from cairn.events.job import Resources
from cairn.events.workflow import PrivacyRule
from cairn.spec.causes import Cause
from cairn.spec.images import has_digest, image_problem
from cairn.spec.privacy import refusal as privacy_refusal
from cairn.spec.quantity import format_cpus, format_memory
from cairn.spec.runtime import StudyPolicy, StudyRuntime

_DIGEST_SUFFIX = "@sha256:*"


class StudyUsage(msgspec.Struct, frozen=True, kw_only=True):
    """What a study already holds at the site.

    Attributes:
        resources: The sum of its running (and reserved) workers' requests.
        jobs: Ids of its jobs with a worker at the site (a second role of one of these jobs
            does not count as another concurrent job).
    """

    resources: Resources = Resources.zero()
    jobs: frozenset[str] = frozenset()


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """The agent's answer to a deployment.

    Attributes:
        accepted: True to go on to capacity and launch.
        cause: Why not, from the closed set; None when accepted.
        message: For people: what was decided and why, with the numbers.
    """

    accepted: bool
    cause: Cause | None = None
    message: str = ""


def image_approved(image: str | None, policy: StudyPolicy) -> tuple[bool, str]:
    """Whether `image` may run for the study; None means the study's default image.

    Patterns are fnmatch-style on the full reference. A pattern ending in `@sha256:*` asks for
    digest pinning: an image without a valid digest never matches it.
    """
    default = policy.images.default
    if image is None:
        if default is None:
            # Nothing to approve: the site runs the job its own way (a local process, or the
            # backend's own default); a container backend without an image fails at launch.
            return True, "no image: the site's own runtime"
        return True, f"the study's default image {default}"
    if image == default:
        return True, "the study's default image"
    if problem := image_problem(image):
        return False, problem
    hint = ""
    for pattern in policy.images.approved:
        if pattern.endswith(_DIGEST_SUFFIX) and not has_digest(image):
            # Say so when the image would pass once pinned: the fix is obvious then.
            if fnmatchcase(image, pattern[: -len(_DIGEST_SUFFIX)]):
                hint = f"; {pattern!r} requires pinning by digest (@sha256:...)"
            continue
        if fnmatchcase(image, pattern):
            return True, f"matches {pattern!r}"
    approved = ", ".join(repr(p) for p in policy.images.approved) or "none besides the default"
    return (
        False,
        f"image {image!r} is not approved for the study here (approved: {approved})" + hint,
    )


def check_deployment(
    policy_file: str | Path,
    runtime: StudyRuntime | None,
    study: str,
    request: Resources,
    image: str | None,
    running_usage: StudyUsage,
    *,
    job: str | None = None,
    privacy: PrivacyRule | None = None,
) -> Decision:
    """Decide a deployment against the site's study_runtime.yaml.

    Args:
        policy_file: Path of the runtime file, named in messages so an operator finds it.
        runtime: The last good runtime file, or None when none has ever loaded.
        study: The deployment's study.
        request: One worker's resources.
        image: The job's image (None: the study's default).
        running_usage: What the study holds at this site now, excluding this worker.
        job: The job's id, so a second role of a running job is not a second concurrent job.
        privacy: The job's privacy filters (`workflow.privacy`), against the site's own.
    """
    if runtime is None:
        return Decision(
            accepted=False,
            cause=Cause.SITE_POLICY,
            message=f"no study runtime is in force at this site ({policy_file} "
            "is missing or has never loaded)",
        )
    policy = runtime.studies.get(study)
    if policy is None:
        return Decision(
            accepted=False,
            cause=Cause.SITE_POLICY,
            message=f"study {study!r} is not in {policy_file}: this site grants it nothing",
        )
    if (why := privacy_refusal(policy.privacy, privacy, policy_file=policy_file,
                               study=study)) is not None:
        return Decision(accepted=False, cause=Cause.SITE_POLICY, message=why)
    ok, reason = image_approved(image, policy)
    if not ok:
        return Decision(accepted=False, cause=Cause.IMAGE_NOT_APPROVED, message=reason)
    over = _over_limits(study, policy, request, running_usage, job)
    if over:
        return Decision(
            accepted=False,
            cause=Cause.OVER_STUDY_LIMIT,
            message="; ".join(over) + f" (limits in {policy_file})",
        )
    return Decision(accepted=True, message=f"accepted: {reason}")


def _over_limits(
    study: str, policy: StudyPolicy, request: Resources, usage: StudyUsage, job: str | None
) -> list[str]:
    limits = policy.limits
    used = usage.resources
    rows = (
        ("gpus", request.gpus, used.gpus, limits.gpus, str),
        ("cpus", request.millicpus, used.millicpus, limits.millicpus, format_cpus),
        ("memory", request.memory_bytes, used.memory_bytes, limits.memory_bytes, format_memory),
    )
    out = []
    for what, asked, held, limit, show in rows:
        if limit is None or asked + held <= limit:
            continue
        if held:
            out.append(
                f"asks for {show(asked)} {what}, study {study!r} already uses "
                f"{show(held)} of its {show(limit)} here"
            )
        else:
            out.append(
                f"asks for {show(asked)} {what}, over study {study!r}'s limit of {show(limit)} here"
            )
    new_job = job is None or job not in usage.jobs
    if (
        limits.concurrent_jobs is not None
        and new_job
        and len(usage.jobs) + 1 > limits.concurrent_jobs
    ):
        out.append(
            f"study {study!r} already runs {len(usage.jobs)} jobs here, its limit is "
            f"{limits.concurrent_jobs} concurrent jobs"
        )
    return out
