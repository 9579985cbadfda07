"""A study's whole state (the study and its jobs), folded from its stream."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import msgspec

from cairn.state import job as job_state
from cairn.state import study as study_state
from cairn.state.job import JobState
from cairn.state.study import StudyState


class StudyView(msgspec.Struct, frozen=True, kw_only=True):
    study: StudyState | None = None
    jobs: dict[str, JobState] = {}


def apply(view: StudyView, event: object) -> StudyView:
    """Route one event of a study stream to the aggregate it belongs to."""
    if isinstance(event, study_state.StudyAdminEvents):
        updated = study_state.apply(view.study, event)
        return view if updated is view.study else msgspec.structs.replace(view, study=updated)
    job_id = getattr(event, "job", None)
    if not isinstance(job_id, str):
        return view
    current = view.jobs.get(job_id)
    updated_job = job_state.apply(current, event)
    if updated_job is current or updated_job is None:
        return view
    return msgspec.structs.replace(view, jobs={**view.jobs, job_id: updated_job})


def fold(events: Iterable[object], initial: StudyView | None = None) -> StudyView:
    """`functools.reduce(apply, events, initial)`: the state is a pure fold."""
    return functools.reduce(apply, events, initial or StudyView())
