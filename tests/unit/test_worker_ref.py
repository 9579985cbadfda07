"""One home for a worker's key: the five fields (job, site, role, rank, attempt) are declared
once for the events that carry them, spread into constructors through one TypedDict, and
read back through `worker_ref`; the event envelope likewise. The wire stays as it was."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import get_type_hints

from cairn.events import (
    DeployCommand,
    DeploymentAccepted,
    Event,
    EventEnvelope,
    LaunchRequested,
    OfWorker,
    OfWorkerAttempt,
    ReportFields,
    WorkerFields,
    WorkerProgress,
    WorkerRef,
    encode,
    event_envelope,
    event_types,
    make_launch_id,
    tag_of,
    worker_ref,
)
from cairn.events.workerref import LaunchFields, WorkerLaunch
from cairn.launcher.backends import LaunchSpec
from cairn.launcher.records import LaunchRecord
from cairn.state.launch import LaunchState

FIVE = ("job", "site", "role", "rank", "attempt")
AT = datetime(2024, 5, 1, tzinfo=UTC)
# Declares the five itself: inheriting them would move its `launch_id` (its first field on
# the wire since the first release) behind them.
OWN_ORDER = {LaunchRequested}


def _own(cls: type) -> tuple[str, ...]:
    return tuple(cls.__struct_fields__)


def test_every_event_with_a_workers_fields_takes_them_from_one_base() -> None:
    for cls in event_types():
        fields = set(_own(cls))
        if set(FIVE) <= fields and cls not in OWN_ORDER:
            assert issubclass(cls, OfWorkerAttempt), f"{tag_of(cls)} copies the five fields"
        elif set(FIVE[:4]) <= fields and cls not in OWN_ORDER:
            assert issubclass(cls, OfWorker), f"{tag_of(cls)} copies a worker's fields"


def test_the_typed_dicts_are_the_structs_fields() -> None:
    assert tuple(get_type_hints(ReportFields)) == _own(OfWorker)[-4:]
    assert tuple(get_type_hints(WorkerFields)) == _own(WorkerRef) == FIVE
    assert set(get_type_hints(LaunchFields)) == set(_own(WorkerLaunch))
    assert tuple(get_type_hints(EventEnvelope)) == _own(Event)
    for record in (LaunchState, LaunchRecord, LaunchSpec):
        assert issubclass(record, WorkerLaunch)


def test_a_ref_spreads_into_events_and_reads_back_from_them() -> None:
    ref = WorkerRef(job="j-1", site="site-a", role="client", rank=2, attempt=1)
    assert ref.launch_id == make_launch_id("j-1", "site-a", "client", 2, 1)
    assert ref.launch_id == "j-1/site-a/client/2/1"
    base = event_envelope("agent@site-a", id="x", at=AT, study="lung", cause="c")
    accepted = DeploymentAccepted(**base, **ref.fields(), launch_id=ref.launch_id)
    deploy = DeployCommand(**base, **ref.fields(), entrypoint="python -m app")
    progress = WorkerProgress(**base, **ref.report_fields(), step=1)
    assert worker_ref(accepted) == worker_ref(deploy) == ref
    assert (progress.job, progress.site, progress.role, progress.rank) == (
        "j-1", "site-a", "client", 2)
    state = LaunchState(**ref.launch_fields("lung"))
    assert worker_ref(state) == ref and state.launch_id == ref.launch_id
    assert LaunchRecord(**state.launch_fields()).launch_fields() == state.launch_fields()


def test_the_wire_is_as_it_was() -> None:
    """Field order on the wire: the envelope, then the worker's five, then the event's own."""
    ref = WorkerRef(job="j-1", site="site-a", role="client")
    base = event_envelope("agent@site-a", id="x", at=AT)
    accepted = json.loads(encode(DeploymentAccepted(**base, **ref.fields(), launch_id="l")))
    assert list(accepted) == ["type", "id", "at", "source", "study", "actor", "cause", "job",
                              "site", "role", "rank", "attempt", "launch_id", "gpus",
                              "resources", "privacy"]  # privacy: added last, as new fields are
    request = json.loads(encode(LaunchRequested(**base, **ref.fields(), launch_id="l",
                                                entrypoint="e")))
    assert list(request)[7:13] == ["launch_id", "job", "site", "role", "rank", "attempt"]


def test_an_envelope_is_fresh_unless_told() -> None:
    one, two = event_envelope("s@a"), event_envelope("s@a")
    assert one["id"] != two["id"] and one["at"].tzinfo is not None
    assert event_envelope("s@a", id="k", at=AT) == {
        "id": "k", "at": AT, "source": "s@a", "study": None, "actor": None, "cause": None}
