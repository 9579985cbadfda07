"""The closed set of causes a deployment or worker ends with (JOBSPEC.md, Job lifecycle).

Every `rejected`, `exited` and job-level failure names exactly one of these; other code imports
the enum rather than spelling the strings, so a typo is a type error and not a new cause.
"""

from __future__ import annotations

from enum import StrEnum


class Cause(StrEnum):
    """Why a deployment was refused or a worker or job ended."""

    SITE_POLICY = "site-policy"
    """The study is not granted at the site (missing from its study_runtime.yaml)."""
    IMAGE_NOT_APPROVED = "image-not-approved"
    """The job's image matches none of the study's approved patterns at the site."""
    OVER_STUDY_LIMIT = "over-study-limit"
    """The request, alone or with the study's current usage, exceeds the study's limits."""
    LAUNCH_FAILED = "launch-failed"
    """The backend could not start the worker (bad image, pull failure, sbatch refused...)."""
    CRASHED = "crashed"
    """The worker exited non-zero on its own."""
    OOM = "oom"
    """The worker was killed for exceeding its memory."""
    TIMEOUT = "timeout"
    """The worker ran past the job's timeout."""
    CANCELLED = "cancelled"
    """Someone cancelled the job."""
    OUTLIVED_SERVER = "outlived-server"
    """The worker was stopped after the job's hub role (its server) finished: it had not
    exited within the job's `end_grace`. The job itself completed."""
    SITE_LOST = "site-lost"
    """The site stopped answering (heartbeats lost) while the worker ran."""
    TOO_FEW_SITES = "too-few-sites"
    """Fewer than `min_sites` clients remain, so the job cannot go on."""
    UNSCHEDULABLE = "unschedulable"
    """No capacity within `queue_timeout`, or no eligible site at all."""
    ALLOCATION_MISMATCH = "allocation-mismatch"
    """The worker could use more GPUs than it asked for, or fewer: it proved its allocation
    before its code ran (cairn.worker.allocation) and ended."""
    INFRASTRUCTURE = "infrastructure"
    """A Cairn or platform failure unrelated to the job's own code (retried per `retries`)."""
