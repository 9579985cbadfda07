"""Server-side fencing on a real nats-server (`cairn.bus.Fence`): once a later holder has
begun its term on a stream, JetStream itself refuses the earlier holder's events there,
even while the earlier one's own clock still says its lease is valid (a process that was
frozen, or a publish nats-py held through a reconnect), and the earlier one learns that it
lost. A stream's first event stays its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cairn import subjects
from cairn.bus import Bus, Fence, Fenced, Lease, replay
from cairn.bus._fence import EXPECTED_SEQ, EXPECTED_SUBJECT
from cairn.events import (
    STUDY_DECODER,
    Event,
    StudyCreated,
    StudySiteAdded,
    StudyTerm,
    event_envelope,
    tag_of,
)

TTL_S = 0.6
STUDY = "fenced"
STREAM = subjects.study_stream(STUDY).name


class Clock:
    """A clock that stands still: its holder believes its lease valid until told otherwise."""

    def __call__(self) -> float:
        return 0.0


def fence_of(bus: Bus, lease: Lease) -> Fence:
    def marker(stream: str) -> Event:
        assert stream == STREAM
        return StudyTerm(**event_envelope("coordinator@hub", study=STUDY,
                                          id=f"study.{STUDY}.term.{lease.term}"),
                         service="coordinator", term=lease.term, holder=lease.record.holder)
    return Fence(bus, lease, marker)


def added(site: str) -> StudySiteAdded:
    return StudySiteAdded(**event_envelope("coordinator@hub", study=STUDY,
                                           id=f"study.{STUDY}.site-added.{site}"), site=site)


async def stored(bus: Bus) -> list[tuple[str, str]]:
    """(tag, site or term) of every event in the study's stream, in order."""
    out = []
    async for item in replay(bus, STREAM, STUDY_DECODER):
        assert item.event is not None
        what = getattr(item.event, "site", None) or str(getattr(item.event, "term", ""))
        out.append((tag_of(item.event), what))
    return out


async def test_a_later_term_fences_out_the_earlier_holder_at_the_server(bus: Bus) -> None:
    await bus.ensure_study(STUDY)
    first = Lease(bus, "coordinator", ttl_s=TTL_S, clock=Clock())
    assert await first.try_acquire()
    old = fence_of(bus, first)

    # A new stream: its first event is the study's creation, then the term begins.
    created = StudyCreated(**event_envelope("coordinator@hub", study=STUDY,
                                            id=f"study.{STUDY}.created"), name=STUDY)
    await old.publish(created, STREAM)
    await old.publish(added("site-a"), STREAM)
    assert await stored(bus) == [("study.created", ""), ("study.term", str(first.term)),
                                 ("study.site-added", "site-a")]

    # Nobody renews the first lease: a standby takes it and begins its term first thing.
    second = Lease(bus, "coordinator")
    assert await asyncio.wait_for(second.acquire(), 10 * TTL_S)
    new = fence_of(bus, second)
    assert await new.begin(STREAM, subjects.study_all(STUDY)) is not None

    # The first still believes it holds the lease (its clock stood still): the server says no.
    assert first.valid()
    with pytest.raises(Fenced):
        await old.publish(added("site-b"), STREAM)
    assert first.lost.is_set() and not first.valid()
    await new.publish(added("site-c"), STREAM)
    assert [e for e in await stored(bus) if e[0] != "study.created"] == [
        ("study.term", str(first.term)), ("study.site-added", "site-a"),
        ("study.term", str(second.term)), ("study.site-added", "site-c")]


async def test_what_an_earlier_holder_sent_late_is_refused_even_as_a_retry(bus: Bus) -> None:
    # What nats-py sends after a reconnect is what was encoded before: the earlier term's
    # expectations, with the same message id as a copy that may have been stored already.
    await bus.ensure_study(STUDY)
    first = Lease(bus, "coordinator", ttl_s=TTL_S, clock=Clock())
    assert await first.try_acquire()
    old = fence_of(bus, first)
    await old.publish(added("site-a"), STREAM)
    held = {EXPECTED_SEQ: str(old._terms[subjects.subject_of(old.marker(STREAM))]),
            EXPECTED_SUBJECT: f"cairn.study.{STUDY}.admin.term"}
    late, retried = added("site-late"), added("site-a")

    second = Lease(bus, "coordinator")
    assert await asyncio.wait_for(second.acquire(), 10 * TTL_S)
    await fence_of(bus, second).begin(STREAM, subjects.study_all(STUDY))

    for event in (late, retried):
        with pytest.raises(Exception, match="10071"):
            await bus.publish(event, headers=held)
    sites = [what for tag, what in await stored(bus) if tag == "study.site-added"]
    assert sites == ["site-a"]


async def test_an_earlier_holder_cannot_begin_a_term_over_a_later_one(bus: Bus) -> None:
    await bus.ensure_study(STUDY)
    first = Lease(bus, "coordinator", ttl_s=TTL_S, clock=Clock())
    assert await first.try_acquire()
    await fence_of(bus, first).publish(added("site-a"), STREAM)  # its term: begun
    second = Lease(bus, "coordinator")
    assert await asyncio.wait_for(second.acquire(), 10 * TTL_S)
    await fence_of(bus, second).begin(STREAM, subjects.study_all(STUDY))
    # A fresh fence of the first (a restart that still had its lease object): refused.
    with pytest.raises(Fenced):
        await fence_of(bus, first).begin(STREAM, subjects.study_all(STUDY))
    terms = [what for tag, what in await stored(bus) if tag == "study.term"]
    assert terms == [str(first.term), str(second.term)]


async def test_begin_writes_nothing_on_a_stream_the_holder_never_wrote(bus: Bus) -> None:
    await bus.ensure_study(STUDY)
    lease = Lease(bus, "coordinator", ttl_s=TTL_S)
    assert await lease.try_acquire()
    assert await fence_of(bus, lease).begin(STREAM, subjects.study_all(STUDY)) is None
    assert await stored(bus) == []


async def test_a_validator_woken_after_its_standby_took_over_cannot_end_a_run_twice(
        bus: Bus) -> None:
    """The validator's own start and publish (`cairn.validator.service`): a run begun by a
    validator that then froze is ended as cut off by the standby that took over; what the
    first one sends on waking (its clock still says its lease is valid) is refused by the
    server, and the run has one end."""
    from cairn.events import FEDERATION_DECODER, ValidationCompleted, ValidationStarted
    from cairn.runtime.service import Runtime, ServiceConfig
    from cairn.validator.service import ValidatorService

    async def validator(lease: Lease) -> ValidatorService:
        config = ServiceConfig(site="hub", options={"actor": "ops"})
        rt = Runtime(bus, config, "hub")
        rt.leases["validator"] = lease
        service = ValidatorService(config)
        await service.start(rt)
        return service

    def fields(verb: str) -> dict[str, object]:
        return {**event_envelope("validator@hub", actor="ops", id=f"run-1.{verb}"),
                "run": "run-1", "site": "site-a", "recipe": "r1"}

    first = Lease(bus, "validator", ttl_s=TTL_S, clock=Clock())
    assert await first.try_acquire()
    frozen = await validator(first)
    await frozen.publish(ValidationStarted(**fields("started")))

    second = Lease(bus, "validator")
    assert await asyncio.wait_for(second.acquire(), 10 * TTL_S)
    await validator(second)  # begins its term, then ends run-1 as cut off

    assert first.valid()
    with pytest.raises(Fenced):
        await frozen.publish(ValidationCompleted(**fields("completed"), status="passed"))
    assert first.lost.is_set()

    ends = []
    async for item in replay(bus, subjects.FEDERATION_STREAM.name, FEDERATION_DECODER,
                             filters=[subjects.validation_any()]):
        if isinstance(item.event, ValidationCompleted):
            ends.append((item.event.run, item.event.status))
    assert ends == [("run-1", "error")]


class Stepped:
    """A clock its test moves: a holder frozen past its lease, then as it was."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_signer_whose_lease_is_not_valid_publishes_no_evidence(
        bus: Bus, tmp_path: Path) -> None:
    """The signer's own start and publish (`cairn.signer.service`): a signer frozen past its
    lease publishes nothing (its standby signs the same run into the same bundle); the
    same signer while its lease is valid stores and announces it."""
    import base64

    from cairn import api
    from cairn.bus import LeaseLost
    from cairn.evidence.bundle import pack
    from cairn.evidence.keys import create_key_files, key_paths
    from cairn.evidence.store import recorded
    from cairn.runtime.service import Runtime, ServiceConfig
    from cairn.signer.service import SignerService
    from cairn.subjects import ApiAddress
    from tests.fixtures import evidence as fx

    key = create_key_files(tmp_path / "signer")
    config = ServiceConfig(site="hub",
                           options={"evidence_key": str(key_paths(tmp_path / "signer")[0])})
    clock = Stepped()
    lease = Lease(bus, "signer", ttl_s=TTL_S, clock=clock)
    assert await lease.try_acquire()
    rt = Runtime(bus, config, "hub")
    rt.leases["signer"] = lease
    signer = SignerService(config)
    await signer.start(rt)
    packed = base64.b64encode(pack(fx.bundle("site-a", [key]))).decode()
    submit = api.Envelope(request=api.EvidenceSubmit(bundle_b64=packed), actor="ops")
    where = ApiAddress(scope="validation", verb="evidence-submit")

    clock.now = 10 * TTL_S  # frozen, and woken after its lease ran out
    with pytest.raises(LeaseLost):
        await signer._on_submit(submit, where)
    assert await recorded(bus, "site-a") == []

    clock.now = 0.0  # the same signer, its lease valid
    await signer._on_submit(submit, where)
    assert [e.site for e in await recorded(bus, "site-a")] == ["site-a"]
