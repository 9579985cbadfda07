"""The coordinator's in-place fold and its lazy site board, held to the pure ones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from cairn import events as ev
from cairn.coordinator.decide import site_status
from cairn.coordinator.live import LiveStudy
from cairn.coordinator.sites import SiteBoard
from cairn.events import Heartbeat, Resources
from cairn.state import view

REPLAY = Path(__file__).parents[1] / "replay"
STREAMS = sorted((REPLAY / "streams").glob("*.jsonl")) + sorted(
    (REPLAY / "histories").glob("*/study.jsonl"))


def _events(path: Path) -> list[object]:
    return [ev.STUDY_DECODER.decode(line) for line in path.read_bytes().splitlines()
            if line.strip()]


def test_the_live_fold_of_every_recorded_stream_equals_the_pure_fold() -> None:
    assert len(STREAMS) > 3
    for path in STREAMS:
        events = _events(path)
        live = LiveStudy()
        for i, event in enumerate(events):
            live.apply(event)
            pure = view.fold(events[:i + 1])
            assert msgspec.to_builtins(live.view) == msgspec.to_builtins(pure), (path, i)
            assert live.live == {j for j, s in pure.jobs.items() if not s.terminal}, (path, i)


def test_the_site_board_judges_every_site_as_site_status_does() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    since = t - timedelta(seconds=100)
    hb = Heartbeat(id="h", at=t, source="agent@b", site="b", seq=1,
                   free=Resources(millicpus=500))
    beats = {"b": (hb, t - timedelta(seconds=1)), "c": (hb, t - timedelta(seconds=60))}
    members = {"a": "org-a", "b": "org-b"}
    board = SiteBoard(members, beats, t, stale_s=3.0, lost_s=30.0, since=since)
    assert sorted(board) == ["a", "b", "c"] and len(board) == 3
    for name in ("a", "b", "c"):
        hb_seen = beats.get(name, (None, None))
        assert board[name] == site_status(hb_seen[0], hb_seen[1], t, stale_s=3.0,
                                          lost_s=30.0, name=name, since=since)
    assert board["b"].online and not board["c"].online and board["a"].lost
    assert board.get("nowhere") is None and "nowhere" not in board
