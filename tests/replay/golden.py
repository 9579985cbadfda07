"""Golden histories: what a recorded history holds and what the reducers fold from it.

A history is the study stream's events of one job (with the study's admin events) and each
site's launch commands for it. The coordinator folds the study stream into a `StudyView`; a
site's agent folds that site's job events into an `AgentState`; its launcher folds its launch
commands and the worker facts of its site into `Launches`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import msgspec

from cairn import events as ev
from cairn.state import agent as agent_state
from cairn.state import launch as launch_state
from cairn.state import view
from cairn.state.agent import AgentState
from cairn.state.launch import Launches
from cairn.state.view import StudyView

SITES = ("site-a", "site-b")


class History(msgspec.Struct, frozen=True, kw_only=True):
    study: list[bytes]
    """STUDY_<study> messages as stored, in stream order."""
    sites: dict[str, list[bytes]]
    """Per site, SITE_<site> messages as stored, in stream order."""


class Expected(msgspec.Struct, frozen=True, kw_only=True):
    study: StudyView
    agents: dict[str, AgentState]
    launchers: dict[str, Launches]


def load(folder: Path) -> History:
    def lines(path: Path) -> list[bytes]:
        return [line for line in path.read_bytes().splitlines() if line.strip()]

    return History(study=lines(folder / "study.jsonl"),
                   sites={site: lines(folder / f"site-{site}.jsonl") for site in SITES
                          if (folder / f"site-{site}.jsonl").exists()})


def _at(event: object) -> datetime:
    at = getattr(event, "at", None)
    assert isinstance(at, datetime)
    return at


def expected_of(history: History) -> Expected:
    """Fold a history with today's reducers."""
    study_events = [ev.STUDY_DECODER.decode(line) for line in history.study]
    agents, launchers = {}, {}
    for site in SITES:
        at_site = [e for e in study_events if getattr(e, "site", None) == site]
        agents[site] = agent_state.fold(at_site)
        commands = [ev.SITE_DECODER.decode(line) for line in history.sites.get(site, [])]
        # The launcher sees its commands and publishes the worker facts: merged by when
        # each happened (a stable sort keeps each stream's own order on a tie).
        launchers[site] = launch_state.fold(sorted([*commands, *at_site], key=_at))
    return Expected(study=view.fold(study_events), agents=agents, launchers=launchers)


def read_expected(folder: Path) -> Expected:
    return msgspec.json.decode((folder / "expected.json").read_bytes(), type=Expected)
