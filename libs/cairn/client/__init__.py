"""The public Python API: what the CLI, `cairn demo`, the services that need a client, and
other programs use.

    from cairn.client import Client

    async with await Client.connect(study="lung") as c:
        job_id = await c.submit("job.yaml")
        final = await c.wait(job_id, timeout=600)

Modules: `core` (the `Client` session: jobs, studies, sites), `jobrequest` (a job spec as the
coordinator receives it), `results` (a job's files and values), `logs` (worker logs),
`deadletters`, `validation` (running a validation and collecting its result), `timeline`
(a study's history for people).

Everything an integrator names is exported here, the types the client's methods take and
return included (`JobState`, `StudyState`, `SiteInfo`, ...), so a program never imports from
below `cairn.client`. These names and their signatures are a stable surface, held to
`compat/client.json` in CI (docs/compatibility.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cairn.api import EvidenceAccepted, FederationInfo, SiteInfo
from cairn.client.core import Client
from cairn.client.deadletters import DeadLetter, delete_message, get_message
from cairn.client.jobrequest import JobRequest
from cairn.client.logs import LogChunk
from cairn.client.timeline import TimelineEntry
from cairn.events import (
    DeadLettered,
    JobSubmitted,
    RecipeRequirement,
    Resources,
    ResultFile,
    RoleRequest,
    StudyAdmin,
)
from cairn.events.workflow import DPRule, PrivacyRule, WorkflowRequest
from cairn.runtime.context import Context
from cairn.state.job import JobResult, JobState, WorkerState
from cairn.state.study import StudyState
from cairn.state.view import StudyView

if TYPE_CHECKING:
    from cairn.client.evidence import EvidenceClient
    from cairn.client.validation import PhaseResult, ValidationResult
    from cairn.evidence.bundle import BundleFiles
    from cairn.evidence.eligibility import Eligibility, Reason
    from cairn.evidence.keys import VerifyingKey
    from cairn.evidence.trust import Role, TrustedSigner, TrustList
    from cairn.snapshot.model import CollectorError, NodeSnapshot, Reading, Snapshot

__all__ = [
    "BundleFiles", "Client", "CollectorError", "Context", "DPRule", "DeadLetter", "DeadLettered",
    "Eligibility", "EvidenceAccepted", "EvidenceClient", "FederationInfo", "JobRequest",
    "JobResult", "JobState", "JobSubmitted", "LogChunk", "NodeSnapshot", "PhaseResult",
    "PrivacyRule", "Reading", "Reason", "RecipeRequirement", "Resources", "ResultFile", "Role",
    "RoleRequest",
    "SiteInfo", "Snapshot", "StudyAdmin", "StudyState", "StudyView", "TimelineEntry",
    "TrustList", "TrustedSigner", "ValidationResult", "VerifyingKey", "WorkerState",
    "WorkflowRequest",
    "delete_message", "get_message",
]

# Imported when first named: they bring the evidence and snapshot code, which most sessions
# (and every short CLI command) never use.
_LAZY = {
    "EvidenceClient": "cairn.client.evidence",
    "PhaseResult": "cairn.client.validation",
    "ValidationResult": "cairn.client.validation",
    "BundleFiles": "cairn.evidence.bundle",
    "Eligibility": "cairn.evidence.eligibility",
    "Reason": "cairn.evidence.eligibility",
    "VerifyingKey": "cairn.evidence.keys",
    "TrustList": "cairn.evidence.trust",
    "TrustedSigner": "cairn.evidence.trust",
    "Role": "cairn.evidence.trust",
    "CollectorError": "cairn.snapshot.model",
    "NodeSnapshot": "cairn.snapshot.model",
    "Reading": "cairn.snapshot.model",
    "Snapshot": "cairn.snapshot.model",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
