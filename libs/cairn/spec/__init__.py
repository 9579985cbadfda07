"""Models and loaders for the four operator/user files of JOBSPEC.md, and site policy.

    job.yaml                 load_job_spec        -> JobSpec       (cairn.spec.job)
    site.yaml                load_site_config     -> SiteConfig    (cairn.spec.site)
    study_runtime.yaml       load_study_runtime   -> StudyRuntime  (cairn.spec.runtime)
    federation.yaml          load_federation      -> Federation    (cairn.spec.federation)

Every loader decodes strictly: an unknown key, a wrong type or a bad value raises
`InvalidInput` (or `InvalidName`) naming the file, line and field.
"""

from __future__ import annotations

from cairn.events.job import Resources
from cairn.spec.causes import Cause
from cairn.spec.duration import format_duration, parse_duration
from cairn.spec.federation import Admin, Federation, FederationSite, StudyMembers, load_federation
from cairn.spec.job import HUB_ROLE, JobSpec, Requirement, Role, load_job_spec, parse_job_spec
from cairn.spec.policy import Decision, StudyUsage, check_deployment, image_approved
from cairn.spec.quantity import format_cpus, format_memory, parse_cpus, parse_gpus, parse_memory
from cairn.spec.roles import Action, AdminRole, allowed
from cairn.spec.runtime import (
    VALIDATION_STUDY,
    StudyLimits,
    StudyPolicy,
    StudyRuntime,
    load_study_runtime,
)
from cairn.spec.site import SiteConfig, discover_inventory, load_site_config

__all__ = [
    "HUB_ROLE",
    "VALIDATION_STUDY",
    "Action",
    "Admin",
    "AdminRole",
    "Cause",
    "Decision",
    "Federation",
    "FederationSite",
    "JobSpec",
    "Requirement",
    "Resources",
    "Role",
    "SiteConfig",
    "StudyLimits",
    "StudyMembers",
    "StudyPolicy",
    "StudyRuntime",
    "StudyUsage",
    "allowed",
    "check_deployment",
    "discover_inventory",
    "format_cpus",
    "format_duration",
    "format_memory",
    "image_approved",
    "load_federation",
    "load_job_spec",
    "load_site_config",
    "load_study_runtime",
    "parse_cpus",
    "parse_duration",
    "parse_gpus",
    "parse_job_spec",
    "parse_memory",
]
