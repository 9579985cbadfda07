"""Every event Cairn writes: frozen msgspec Structs tagged by `type`, one union per stream.

One JSON codec: `encode(event)` and a decoder per stream, each built once. Events are decoded
leniently (unknown fields are ignored) so old readers survive new fields.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from cairn.events.base import Event, EventEnvelope, event_envelope, now, stamp
from cairn.events.deadletter import DeadLettered
from cairn.events.evidence import EvidenceRecorded
from cairn.events.federation import (
    BackendDeclared,
    FederationEvent,
    FederationSeeded,
    FederationSite,
    FederationSiteAdded,
    FederationTerm,
    Heartbeat,
    ReadingChange,
    RecordSkipped,
    SiteConfigLoaded,
    SiteConfigRejected,
    SnapshotDrift,
    SnapshotRecorded,
    ValidationCompleted,
    ValidationPhase,
    ValidationStarted,
    ValidationTerm,
)
from cairn.events.job import (
    JOB_TERMINAL,
    Deployment,
    JobAborted,
    JobCancelRequested,
    JobCompleted,
    JobDispatched,
    JobEnding,
    JobEvent,
    JobFailed,
    JobQueued,
    JobRunning,
    JobSubmitted,
    JobUnschedulable,
    RecipeRequirement,
    Resources,
    RoleRequest,
)
from cairn.events.launch import DatasetMount, LaunchCancel, LaunchCommand, LaunchRequested
from cairn.events.site import (
    CancelCommand,
    DeployCommand,
    DeploymentAccepted,
    DeploymentRejected,
    SiteCommand,
    SiteJobEvent,
    WorkerAllocation,
    WorkerExited,
    WorkerLaunching,
    WorkerRunning,
)
from cairn.events.study import (
    StudyAdmin,
    StudyAdminAdded,
    StudyAdminEvent,
    StudyAdminRemoved,
    StudyCreated,
    StudyHold,
    StudySiteAdded,
    StudySiteRemoved,
    StudyTerm,
)
from cairn.events.worker import ResultFile, WorkerEvent, WorkerMetric, WorkerProgress, WorkerResult
from cairn.events.workerref import (
    OfWorker,
    OfWorkerAttempt,
    ReportFields,
    WorkerFields,
    WorkerRef,
    make_launch_id,
    worker_ref,
)

E = TypeVar("E")

StudyStreamEvent = StudyAdminEvent | JobEvent | SiteCommand | SiteJobEvent | WorkerEvent
SiteStreamEvent = LaunchCommand
FederationStreamEvent = FederationEvent
DeadLetterStreamEvent = DeadLettered
EvidenceStreamEvent = EvidenceRecorded
AnyEvent = (StudyStreamEvent | SiteStreamEvent | FederationStreamEvent | DeadLettered | Heartbeat
            | EvidenceRecorded)

_encoder = msgspec.json.Encoder()

STUDY_DECODER: msgspec.json.Decoder[StudyStreamEvent] = msgspec.json.Decoder(StudyStreamEvent)
SITE_DECODER: msgspec.json.Decoder[SiteStreamEvent] = msgspec.json.Decoder(SiteStreamEvent)
FEDERATION_DECODER: msgspec.json.Decoder[FederationStreamEvent] = msgspec.json.Decoder(
    FederationStreamEvent
)
DEADLETTER_DECODER: msgspec.json.Decoder[DeadLettered] = msgspec.json.Decoder(DeadLettered)
HEARTBEAT_DECODER: msgspec.json.Decoder[Heartbeat] = msgspec.json.Decoder(Heartbeat)
EVIDENCE_DECODER: msgspec.json.Decoder[EvidenceRecorded] = msgspec.json.Decoder(EvidenceRecorded)
ANY_DECODER: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)


def encode(event: Any) -> bytes:
    """The one wire encoding: compact JSON."""
    return _encoder.encode(event)


def decode(data: bytes) -> AnyEvent:
    """Decode any Cairn event by its tag (raises msgspec.DecodeError / ValidationError)."""
    return ANY_DECODER.decode(data)


def event_types() -> list[type[Event]]:
    """Every concrete event type, sorted by tag (the public contract `schemas/` documents)."""
    seen: dict[str, type[Event]] = {}
    stack: list[type[Event]] = [Event]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            stack.append(sub)
            tag = sub.__struct_config__.tag
            if isinstance(tag, str):
                seen[tag] = sub
    return [seen[t] for t in sorted(seen)]


def tag_of(event: Event | type[Event]) -> str:
    tag = event.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


__all__ = [
    "JOB_TERMINAL",
    "AnyEvent",
    "BackendDeclared",
    "CancelCommand",
    "DatasetMount",
    "DeadLettered",
    "DeployCommand",
    "Deployment",
    "DeploymentAccepted",
    "DeploymentRejected",
    "Event",
    "EventEnvelope",
    "EvidenceRecorded",
    "EvidenceStreamEvent",
    "FederationEvent",
    "FederationSeeded",
    "FederationSite",
    "FederationSiteAdded",
    "FederationStreamEvent",
    "FederationTerm",
    "Heartbeat",
    "JobAborted",
    "JobCancelRequested",
    "JobCompleted",
    "JobDispatched",
    "JobEnding",
    "JobEvent",
    "JobFailed",
    "JobQueued",
    "JobRunning",
    "JobSubmitted",
    "JobUnschedulable",
    "LaunchCancel",
    "LaunchCommand",
    "LaunchRequested",
    "OfWorker",
    "OfWorkerAttempt",
    "ReadingChange",
    "RecipeRequirement",
    "RecordSkipped",
    "ReportFields",
    "Resources",
    "ResultFile",
    "RoleRequest",
    "SiteCommand",
    "SiteConfigLoaded",
    "SiteConfigRejected",
    "SiteJobEvent",
    "SiteStreamEvent",
    "SnapshotDrift",
    "SnapshotRecorded",
    "StudyAdmin",
    "StudyAdminAdded",
    "StudyAdminEvent",
    "StudyAdminRemoved",
    "StudyCreated",
    "StudyHold",
    "StudySiteAdded",
    "StudySiteRemoved",
    "StudyStreamEvent",
    "StudyTerm",
    "ValidationCompleted",
    "ValidationPhase",
    "ValidationStarted",
    "ValidationTerm",
    "WorkerAllocation",
    "WorkerEvent",
    "WorkerExited",
    "WorkerFields",
    "WorkerLaunching",
    "WorkerMetric",
    "WorkerProgress",
    "WorkerRef",
    "WorkerResult",
    "WorkerRunning",
    "decode",
    "encode",
    "event_envelope",
    "event_types",
    "make_launch_id",
    "now",
    "stamp",
    "tag_of",
    "worker_ref",
]
