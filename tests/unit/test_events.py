"""Laws every event obeys: the wire round trip, one subject each, lenient and tag-strict decoding.

Strategies are built from msgspec's own type information, so every field (optional ones
included) is exercised, and a new event type is covered the day it is added.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn import events as ev
from cairn import subjects
from cairn.errors import InvalidName
from cairn.names import NAME_RULE
from tests.subject_match import may

EVENT_TYPES = ev.event_types()
TAGS = [ev.tag_of(t) for t in EVENT_TYPES]
# Fields that become subject tokens: they obey the name rule, or `subject_of` refuses them.
NAME_FIELDS = frozenset({"study", "site", "job", "role", "recipe"})
STREAM_DECODERS: list[msgspec.json.Decoder[Any]] = [
    ev.STUDY_DECODER,
    ev.SITE_DECODER,
    ev.FEDERATION_DECODER,
    ev.DEADLETTER_DECODER,
    ev.HEARTBEAT_DECODER,
    ev.ANY_DECODER,
]

names = st.from_regex(NAME_RULE, fullmatch=True)
# JSON has no NaN or infinity, and msgspec's integers stop at 64 bits.
floats = st.floats(allow_nan=False, allow_infinity=False)
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
text = st.text(st.characters(codec="utf-8"), max_size=20)
utc_times = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | ints | floats | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


def _bounded_ints(t: msgspec.inspect.IntType) -> st.SearchStrategy[int]:
    low = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else -(2**63))
    high = t.le if t.le is not None else (t.lt - 1 if t.lt is not None else 2**63 - 1)
    return st.integers(min_value=low, max_value=high)


def strategy(t: msgspec.inspect.Type, field: str = "") -> st.SearchStrategy[Any]:
    """Values of a msgspec type; a type it does not know fails loudly, naming it."""
    match t:
        case msgspec.inspect.StructType():
            fields = {f.name: strategy(f.type, f.name) for f in t.fields}
            return st.fixed_dictionaries(fields).map(lambda kw: t.cls(**kw))
        case msgspec.inspect.StrType():
            return names if field in NAME_FIELDS else text
        case msgspec.inspect.IntType():
            return _bounded_ints(t)
        case msgspec.inspect.FloatType():
            return floats
        case msgspec.inspect.BoolType():
            return st.booleans()
        case msgspec.inspect.NoneType():
            return st.none()
        case msgspec.inspect.DateTimeType():
            return utc_times
        case msgspec.inspect.AnyType():
            return json_values
        case msgspec.inspect.LiteralType():
            return st.sampled_from(t.values)
        case msgspec.inspect.ListType():
            return st.lists(strategy(t.item_type, field), max_size=3)
        case msgspec.inspect.DictType():
            return st.dictionaries(strategy(t.key_type), strategy(t.value_type), max_size=3)
        case msgspec.inspect.UnionType():
            return st.one_of([strategy(arm, field) for arm in t.types])
    raise NotImplementedError(f"tests/unit/test_events.py: no strategy for {t!r} ({field})")


def events_of(cls: type[ev.Event]) -> st.SearchStrategy[ev.Event]:
    return strategy(msgspec.inspect.type_info(cls))


any_event = st.sampled_from(EVENT_TYPES).flatmap(events_of)
# Per type and across types: enough to hit every field shape without a slow unit suite.
per_type = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
quick = settings(per_type, max_examples=100)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=TAGS)
def test_encode_then_decode_is_the_identity(cls: type[ev.Event]) -> None:
    @per_type
    @given(event=events_of(cls))
    def law(event: ev.Event) -> None:
        wire = ev.encode(event)
        assert ev.decode(wire) == event
        assert msgspec.json.decode(wire, type=cls) == event
        assert ev.encode(ev.decode(wire)) == wire

    law()


@quick
@given(event=any_event)
def test_every_event_has_one_subject_in_its_stream(event: ev.Event) -> None:
    study = event.study if event.study is not None else "s"
    event = msgspec.structs.replace(event, study=study)
    if isinstance(event, ev.DeadLettered):
        event = msgspec.structs.replace(event, stream=subjects.study_stream(study).name)
    subject = subjects.subject_of(event)
    tokens = subject.split(".")
    assert tokens[0] == subjects.ROOT and all(tokens) and not {"*", ">"} & set(tokens)
    # Evidence subjects end with the recipe (`cairn.evidence.<site>.<recipe>`), not a verb.
    assert tokens[-1] in ev.tag_of(event) or isinstance(
        event, ev.Heartbeat | ev.DeadLettered | ev.EvidenceRecorded)
    if isinstance(event, ev.Heartbeat):
        return  # not stored: the latest is kept in KV `sites`
    streams = [
        subjects.study_stream(study),
        subjects.data_stream(study),
        *(subjects.site_stream(s) for s in {getattr(event, "site", None)} if isinstance(s, str)),
        *subjects.GLOBAL_STREAMS,
    ]
    storing = [s.name for s in streams if may(s.subjects, subject)]
    assert len(storing) == 1, (subject, storing)


@quick
@given(
    event=any_event,
    extra=st.dictionaries(
        st.text(min_size=1, max_size=10).filter(lambda k: k != "type").map(lambda k: "x_" + k),
        json_values,
        min_size=1,
        max_size=3,
    ),
)
def test_unknown_fields_are_ignored(event: ev.Event, extra: dict[str, Any]) -> None:
    doc = msgspec.json.decode(ev.encode(event))
    doc.update(extra)
    assert ev.decode(msgspec.json.encode(doc)) == event


@quick
@given(event=any_event, tag=st.text(min_size=1, max_size=20).filter(lambda t: t not in TAGS))
def test_an_unknown_tag_does_not_decode(event: ev.Event, tag: str) -> None:
    doc = msgspec.json.decode(ev.encode(event))
    doc["type"] = tag
    for decoder in STREAM_DECODERS:
        with pytest.raises(msgspec.ValidationError):
            decoder.decode(msgspec.json.encode(doc))


def test_stream_decoders_partition_the_event_types() -> None:
    # Every event decodes through exactly one stream's union (Heartbeat: its own decoder).
    streams = [
        ev.StudyStreamEvent,
        ev.SiteStreamEvent,
        ev.FederationStreamEvent,
        ev.DeadLettered,
        ev.Heartbeat,
        ev.EvidenceStreamEvent,
    ]
    members = [set(getattr(u, "__args__", (u,))) for u in streams]
    for cls in EVENT_TYPES:
        assert sum(cls in m for m in members) == 1, ev.tag_of(cls)


@quick
@given(event=any_event, bad=st.sampled_from(["", "Up", "a.b", "*", ">", "a b", "-a", "x" * 64]))
def test_the_subject_is_the_rows_pattern_filled_by_the_name_rule(event: ev.Event,
                                                                  bad: str) -> None:
    # `subject_of` builds subjects its own faster way: it must be `fill_with` of the row.
    from cairn.subjects.table import fill_with, rows_of_event

    study = event.study if event.study is not None else "s"
    event = msgspec.structs.replace(event, study=study)
    if isinstance(event, ev.DeadLettered):
        event = msgspec.structs.replace(event, stream=subjects.study_stream(study).name)
    (row,) = rows_of_event(type(event))
    tokens = {n: getattr(event, n) for n in row.placeholders if n != "verb"}
    tokens["verb"] = ev.tag_of(event).rsplit(".", 1)[-1]
    assert subjects.subject_of(event) == fill_with(row.pattern, tokens)
    named = [n for n in row.placeholders if n in NAME_FIELDS]
    for name in named:
        with pytest.raises(InvalidName, match=name):
            subjects.subject_of(msgspec.structs.replace(event, **{name: bad}))
