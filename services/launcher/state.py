"""One study as a site's launcher sees it: who takes part (its admin events, folded with
`cairn.state.study`) and the site's deploy commands not launched yet, by launch id.

A pure fold over the study stream's messages (those of the index's filters) with their
stream sequences, in order: a message at or below the last one applied changes nothing, so
the same message fed twice, by the live consumer and by a catch-up read, counts once. A
deploy command leaves the index when the agent rejects it or the launcher uses it.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from cairn.events import DeployCommand, DeploymentRejected, worker_ref
from cairn.launcher.records import IndexedDeploy
from cairn.state import study as study_state
from cairn.state.study import StudyAdminEvents, StudyState


class StudyIndex(msgspec.Struct, frozen=True, kw_only=True):
    """Attributes:
        name: The study.
        study: Its membership and admins, once created.
        seq: The stream sequence of the last message applied.
        deploys: This site's deploy commands not yet launched or rejected, by launch id.
    """

    name: str
    study: StudyState | None = None
    seq: int = 0
    deploys: dict[str, IndexedDeploy] = {}

    def has_site(self, site: str) -> bool:
        return self.study is not None and site in self.study.sites


def apply(index: StudyIndex, seq: int, event: object, *, site: str,
          launched: Callable[[str], bool] = lambda _: False,
          again: bool = False) -> StudyIndex:
    """Apply one message of the study's stream (`seq` its sequence); `launched` says which
    launch ids were used already (a deploy command published again is not indexed anew).

    `again`: a deploy command delivered once more because storing it failed, applied even
    at or below `seq` (a deploy command applied twice is still one entry).
    """
    if seq <= index.seq and not (again and isinstance(event, DeployCommand)):
        return index
    read = max(seq, index.seq)
    if isinstance(event, StudyAdminEvents):
        return msgspec.structs.replace(index, study=study_state.apply(index.study, event),
                                       seq=read)
    if not isinstance(event, DeployCommand | DeploymentRejected):
        return msgspec.structs.replace(index, seq=read)
    launch_id = worker_ref(event).launch_id
    deploys = dict(index.deploys)
    if isinstance(event, DeployCommand):
        if event.site == site and event.study == index.name and not launched(launch_id):
            deploys[launch_id] = IndexedDeploy(seq=seq, deploy=event)
    else:
        deploys.pop(launch_id, None)
    return msgspec.structs.replace(index, seq=read, deploys=deploys)


def without(index: StudyIndex, launch_id: str) -> StudyIndex:
    """The index once `launch_id` was used: its deploy command is not matched again."""
    if launch_id not in index.deploys:
        return index
    return msgspec.structs.replace(
        index, deploys={k: v for k, v in index.deploys.items() if k != launch_id})
