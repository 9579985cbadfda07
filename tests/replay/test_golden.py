"""Golden streams recorded from real runs (tools/record_replay.py), folded with today's
reducers: a change that would rewrite what a recorded history means fails here."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from cairn import events as ev
from cairn.state import view
from cairn.state.view import StudyView

STREAMS = sorted((Path(__file__).parent / "streams").glob("*.jsonl"))


@pytest.mark.parametrize("stream", STREAMS, ids=[s.stem for s in STREAMS])
def test_golden_stream_folds_to_the_recorded_state(stream: Path) -> None:
    lines = [line for line in stream.read_bytes().splitlines() if line.strip()]
    folded = view.fold(ev.STUDY_DECODER.decode(line) for line in lines)
    expected = msgspec.json.decode(stream.with_suffix(".expected.json").read_bytes(),
                                   type=StudyView)
    assert folded == expected


def test_there_are_golden_streams() -> None:
    assert STREAMS, "tests/replay/streams holds recorded streams (tools/record_replay.py)"
