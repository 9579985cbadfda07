"""The coordinator's live view of one study: the fold of `cairn.state.view`, kept in place.

`cairn.state.view.apply` is pure: each job event returns a new `StudyView` with a new jobs
dict, a copy of every job the study ever had. Live, with thousands of jobs and ten events
each, that copy is most of the coordinator's time. `LiveStudy` applies the same reducers
(`cairn.state.study.apply` and `cairn.state.job.apply`, per job) to a dict it owns, and
keeps the ids of the jobs not yet ended, so the ticker looks at those only. Its `view` is
what the pure fold gives (tests/unit/test_coordinator_live.py holds the two together).
"""

from __future__ import annotations

import msgspec

from cairn.state import job as job_state
from cairn.state import study as study_state
from cairn.state.job import JobState
from cairn.state.view import StudyView


class LiveStudy:
    """A study's view, updated in place by the same reducers as the pure fold."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobState] = {}
        self.live: set[str] = set()
        """Ids of the jobs not ended."""
        self.view = StudyView(jobs=self.jobs)
        """Shares `jobs`: read it, never keep it past an await that may apply events."""

    def apply(self, event: object) -> None:
        """Fold one event of the study's stream."""
        if isinstance(event, study_state.StudyAdminEvents):
            updated = study_state.apply(self.view.study, event)
            if updated is not self.view.study:
                self.view = msgspec.structs.replace(self.view, study=updated)
            return
        job_id = getattr(event, "job", None)
        if not isinstance(job_id, str):
            return
        current = self.jobs.get(job_id)
        updated_job = job_state.apply(current, event)
        if updated_job is current or updated_job is None:
            return
        self.jobs[job_id] = updated_job
        if updated_job.terminal:
            self.live.discard(job_id)
        else:
            self.live.add(job_id)
