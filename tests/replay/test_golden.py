"""Golden streams recorded from real runs (tools/record_replay.py), folded with today's
reducers: a change that would rewrite what a recorded history means fails here."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from cairn import events as ev
from cairn.state import view
from cairn.state.view import StudyView
from tests.replay import golden

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


HISTORIES = sorted(p for p in (Path(__file__).parent / "histories").iterdir() if p.is_dir())
# What each recorded history must show, so a re-recording that went wrong cannot pass.
ENDINGS = {
    "completed": ("completed", None, None),
    "failed": ("failed", "crashed", 3),
    "oom": ("failed", "oom", None),
    "timeout": ("failed", "timeout", None),
    "rejected": ("failed", "image-not-approved", None),
    "cancelled-while-running": ("aborted", "cancelled", 143),
    "reconciled-after-restart": ("completed", None, 0),
}


@pytest.mark.parametrize("folder", HISTORIES, ids=[h.name for h in HISTORIES])
def test_golden_history_folds_to_the_recorded_states(folder: Path) -> None:
    """The coordinator's, each agent's and each launcher's fold of a recorded history."""
    history = golden.load(folder)
    assert golden.expected_of(history) == golden.read_expected(folder)


@pytest.mark.parametrize("folder", HISTORIES, ids=[h.name for h in HISTORIES])
def test_golden_history_ends_as_named(folder: Path) -> None:
    expected = golden.read_expected(folder)
    (job,) = expected.study.jobs.values()
    state, cause, exit_code = ENDINGS[folder.name]
    assert (job.state, job.cause) == (state, cause)
    agent, launches = expected.agents["site-a"], expected.launchers["site-a"].launches
    assert not agent.allocations, "an ended job holds nothing at the site"
    assert len(agent.decided) == 1
    if folder.name == "rejected":
        assert launches == {}
        return
    (launch,) = launches.values()
    assert launch.state == "exited" and launch.reason == cause
    if exit_code is not None:
        assert launch.exit_code == exit_code
    assert launch.cancelled == (folder.name == "cancelled-while-running")


def test_there_are_golden_histories() -> None:
    assert set(ENDINGS) <= {h.name for h in HISTORIES}, "tools/record_golden.py records them"
