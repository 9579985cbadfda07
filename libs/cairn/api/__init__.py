"""The request/reply contract on `cairn.api.*`: typed requests in one envelope, typed replies.

A client sends an `Envelope` (JSON) on `cairn.api.fed.<verb>`, `cairn.api.study.<study>.<verb>`,
`cairn.api.site.<site>.<verb>` or `cairn.api.validation.<verb>`; the service answers with a
`Reply` that holds a `Result` or an `ErrorBody`. Schemas: `schemas/api/` and the AsyncAPI
document.
"""

from cairn.api.envelope import (
    MAX_REQUEST_BYTES,
    Envelope,
    decode_envelope,
    decode_reply,
    encode_envelope,
    encode_error,
    encode_result,
)
from cairn.api.replies import (
    CancelAccepted,
    ErrorBody,
    EvidenceAccepted,
    FederationInfo,
    FederationResult,
    JobResult,
    JobsResult,
    LogData,
    Reply,
    Result,
    SiteInfo,
    SiteResult,
    SitesResult,
    SnapshotTaken,
    StudiesResult,
    StudyResult,
    Submitted,
    ValidationAccepted,
)
from cairn.api.requests import (
    READS,
    REQUEST_TYPES,
    EvidenceSubmit,
    FederationShow,
    JobCancel,
    JobList,
    JobRequest,
    JobShow,
    LogRead,
    Request,
    SiteList,
    SnapshotNow,
    StudyAddAdmin,
    StudyAddSite,
    StudyCreate,
    StudyList,
    StudyRemoveAdmin,
    StudyRemoveSite,
    StudyShow,
    StudySite,
    StudySites,
    Submit,
    ValidationRun,
    verb_of,
)

__all__ = [
    "MAX_REQUEST_BYTES", "READS", "REQUEST_TYPES", "CancelAccepted", "Envelope", "ErrorBody",
    "EvidenceAccepted", "EvidenceSubmit",
    "FederationInfo", "FederationResult", "FederationShow", "JobCancel", "JobList",
    "JobRequest", "JobResult", "JobShow", "JobsResult", "LogData", "LogRead", "Reply",
    "Request", "Result", "SiteInfo", "SiteList", "SiteResult", "SitesResult", "SnapshotNow",
    "SnapshotTaken", "StudiesResult", "StudyAddAdmin", "StudyAddSite", "StudyCreate",
    "StudyList", "StudyRemoveAdmin", "StudyRemoveSite", "StudyResult", "StudyShow",
    "StudySite", "StudySites", "Submit", "Submitted", "ValidationAccepted", "ValidationRun",
    "decode_envelope", "decode_reply", "encode_envelope", "encode_error", "encode_result",
    "verb_of",
]
