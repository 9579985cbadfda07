"""Every decoder of bus data, fed arbitrary bytes and wrong-typed JSON, either decodes or
raises the errors its callers handle (msgspec's decode errors, or a Cairn error): never a
TypeError, KeyError, RecursionError or anything else that would crash a service.

One entry per subject family, decoded the way the service that reads it decodes it: while
running (stream consumers, request handlers, core subscriptions) and at start (the last
snapshot record, KV entries)."""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn import api, events, subjects
from cairn.client import deadletters
from cairn.errors import CairnError, InvalidInput
from cairn.events.decoding import decode_with
from cairn.launcher.records import LaunchRecord
from cairn.runtime.health import is_ready
from cairn.snapshot.model import decode as decode_snapshot
from cairn.worker import dataplane

ALLOWED = (msgspec.DecodeError, CairnError)

VERBS = sorted(str(t.__struct_config__.tag) for t in api.REQUEST_TYPES)


def _dataplane(data: bytes) -> Any:
    envelope = dataplane._decode_envelope(data)  # None for garbage: dropped with a warning
    if envelope is not None and envelope.body is not None:
        return dataplane.decode_payload(envelope.codec, envelope.body)
    return dataplane.decode_payload("msgpack", data)


def _api_requests(data: bytes) -> Any:
    return [_or_error(lambda v=v: api.decode_envelope(data, verb=v, study="demo"))
            for v in VERBS]


def _or_error(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ALLOWED as exc:
        return exc


def _with(decoder: Any) -> Callable[[bytes], Any]:
    """As the bus decodes: consumers, replays and KV entries all call `decode_with`."""
    return lambda data: decode_with(decoder, data)


DECODERS: dict[str, Callable[[bytes], Any]] = {
    "study events (STUDY_<study>)": _with(events.STUDY_DECODER),
    "site launch commands (SITE_<site>)": _with(events.SITE_DECODER),
    "federation events, snapshots records, validation (FEDERATION)":
        _with(events.FEDERATION_DECODER),
    "heartbeats (core + KV sites)": _with(events.HEARTBEAT_DECODER),
    "snapshots (inline or object store)": lambda d: decode_snapshot(d, source="fuzz"),
    "data plane (DATA_<study>)": _dataplane,
    "api requests": _api_requests,
    "api replies": lambda d: api.decode_reply(d, subject="cairn.api.fed.fuzz"),
    "health replies": is_ready,
    "dead letters (DEADLETTER)": _with(events.DEADLETTER_DECODER),
    "evidence (EVIDENCE)": _with(events.EVIDENCE_DECODER),
    "any event (replay, timeline)": _with(events.ANY_DECODER),
    "launch records (KV launches_<site>)": _with(msgspec.json.Decoder(LaunchRecord)),
}

JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                | st.text(max_size=40) | st.integers(min_value=2**63, max_value=2**80))
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=5),
    max_leaves=25,
)
# MessagePack holds 64-bit integers only.
MSGPACK_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
    | st.text(max_size=40) | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=5),
    max_leaves=25,
)
TAGS = sorted({events.tag_of(t) for t in events.event_types()}
              | {str(t.__struct_config__.tag) for t in api.REQUEST_TYPES})


def _fields(tag: str) -> list[str]:
    for type_ in (*events.event_types(), *api.REQUEST_TYPES):
        if str(type_.__struct_config__.tag) == tag:
            return [f.name for f in msgspec.structs.fields(type_)]
    return []


@st.composite
def tagged_wrong_types(draw: st.DrawFn) -> bytes:
    """An object with a real `type` tag and its real field names, holding arbitrary values."""
    tag = draw(st.sampled_from(TAGS))
    names = _fields(tag)
    obj: dict[str, Any] = {"type": tag}
    for name in draw(st.lists(st.sampled_from(names), unique=True)) if names else []:
        obj[name] = draw(JSON_VALUES)
    if draw(st.booleans()):  # wrapped, as an envelope or a reply would carry it
        obj = {draw(st.sampled_from(["request", "result", "event", "snapshot"])): obj,
               "ok": draw(st.booleans())}
    return msgspec.json.encode(obj)


@st.composite
def deeply_nested_fields(draw: st.DrawFn) -> bytes:
    """A real tag with one field nested thousands deep: msgspec raises RecursionError there."""
    tag = draw(st.sampled_from(TAGS))
    name = draw(st.sampled_from(_fields(tag) or ["x"]))
    depth = draw(st.integers(min_value=500, max_value=20_000))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    value = opener * depth + b"1" + closer * depth
    obj = b'{"type":"' + tag.encode() + b'","' + name.encode() + b'":' + value + b"}"
    if draw(st.booleans()):
        obj = b'{"ok":true,"request":' + obj + b',"result":' + obj + b"}"
    return obj


PAYLOADS = (
    st.binary(max_size=512)
    | JSON_VALUES.map(msgspec.json.encode)
    | tagged_wrong_types()
    | MSGPACK_VALUES.map(msgspec.msgpack.encode)
    | st.integers(min_value=1, max_value=50_000).map(lambda n: b"[" * n)
    | deeply_nested_fields()
)


def _family_ids() -> list[str]:
    return list(DECODERS)


@pytest.mark.parametrize("family", _family_ids())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=PAYLOADS)
def test_decoder_never_raises_anything_unhandled(family: str, data: bytes) -> None:
    try:
        DECODERS[family](data)
    except ALLOWED:
        pass


@settings(max_examples=200, deadline=None)
@given(dtype=st.text(max_size=10), shape=st.lists(st.integers(-3, 10**6), max_size=4),
       body=st.binary(max_size=64))
def test_data_plane_arrays_from_garbage_are_refused_not_crashes(
        dtype: str, shape: list[int], body: bytes) -> None:
    header = msgspec.msgpack.encode((dtype, shape))
    ext = msgspec.msgpack.Ext(1, len(header).to_bytes(4, "big") + header + body)
    try:
        dataplane.decode_payload("msgpack", msgspec.msgpack.encode(ext))
    except ALLOWED:
        pass


class _DeadLetterBus:
    """The three calls `redrive` makes, on one stored dead letter."""

    def __init__(self, letter: bytes) -> None:
        self.letter: bytes | None = letter
        self.published: list[tuple[str, bytes]] = []

    async def get_message(self, stream: str, seq: int) -> tuple[str, dict[str, str], bytes]:
        assert self.letter is not None
        return "cairn.deadletter.S", {}, self.letter

    async def publish_bytes(self, subject: str, payload: bytes, **_: Any) -> int:
        self.published.append((subject, payload))
        return 1

    async def delete_message(self, stream: str, seq: int) -> None:
        self.letter = None


# Strict base64 (RFC 4648 alphabet, whole quanta, padding only at the end): the oracle.
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


@given(text=st.text(max_size=40) | st.binary(max_size=30).map(
    lambda b: base64.b64encode(b).decode()))
def test_dead_letter_payload_garbage_is_found_before_a_redrive(text: str) -> None:
    """A payload that is not base64 is refused by redrive (InvalidInput, exit 3, naming the
    field) before anything is published or deleted; a good one goes back on its subject."""
    letter = events.DeadLettered(**events.stamp(), source="fuzz", stream="S", subject="s",
                                 consumer="c", payload_b64=text)
    bus = _DeadLetterBus(events.encode(letter))
    if _BASE64.fullmatch(text):
        asyncio.run(deadletters.redrive(bus, 7))  # type: ignore[arg-type]
        assert bus.published == [("s", base64.b64decode(text))]
        assert bus.letter is None, "a redriven dead letter is deleted"
        return
    with pytest.raises(InvalidInput) as refused:
        asyncio.run(deadletters.redrive(bus, 7))  # type: ignore[arg-type]
    assert refused.value.field == "payload_b64"
    assert bus.published == [] and bus.letter is not None, "nothing changed"


def test_every_stream_has_a_decoder_here() -> None:
    """A new stream of bus data gets an entry in DECODERS, or this fails."""
    streams = {spec.name for spec in subjects.GLOBAL_STREAMS} | {"STUDY_", "SITE_", "DATA_"}
    named = " ".join(DECODERS)
    assert [s for s in sorted(streams) if s not in named] == []
