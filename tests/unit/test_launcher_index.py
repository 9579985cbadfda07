"""The launcher's per-study index (`cairn.launcher.state`): a pure fold over the study
stream's messages, fed by a live consumer and by catch-up reads, where each message counts
once however often it is fed."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from cairn.events import (
    DeployCommand,
    DeploymentRejected,
    StudyAdmin,
    StudyAdminAdded,
    StudyAdminRemoved,
    StudyCreated,
    StudySiteAdded,
    StudySiteRemoved,
)
from cairn.launcher import state
from cairn.launcher.state import StudyIndex

BASE: dict[str, Any] = {"at": "2026-01-01T00:00:00Z", "study": "s1", "source": "x@hub"}


def _deploy(job: str, site: str = "site-a", attempt: int = 0) -> DeployCommand:
    return msgspec.convert({**BASE, "id": f"d-{job}-{site}-{attempt}", "job": job,
                            "site": site, "role": "client", "attempt": attempt,
                            "entrypoint": "python main.py"}, DeployCommand)


def _rejected(job: str) -> DeploymentRejected:
    return msgspec.convert({**BASE, "id": f"r-{job}", "job": job, "site": "site-a",
                            "role": "client", "reason": "site-policy", "message": "no"},
                           DeploymentRejected)


CREATED = msgspec.convert({**BASE, "id": "c", "name": "s1", "sites": ["hub"],
                           "admins": [{"name": "bob@b", "org": "b", "role": "lead"}]},
                          StudyCreated)
ADMIN_EVENTS = [
    msgspec.convert({**BASE, "id": "sa", "site": "site-a"}, StudySiteAdded),
    msgspec.convert({**BASE, "id": "sr", "site": "site-a"}, StudySiteRemoved),
    StudyAdminAdded(**BASE, id="aa", admin=StudyAdmin(name="eve@e", org="e", role="lead")),
    msgspec.convert({**BASE, "id": "ar", "name": "eve@e"}, StudyAdminRemoved),
    msgspec.convert({**BASE, "id": "ar2", "name": "bob@b"}, StudyAdminRemoved),
]
JOBS = ["j-1", "j-2", "j-3"]
MESSAGES = st.lists(st.one_of(
    st.sampled_from(ADMIN_EVENTS),
    st.builds(_deploy, st.sampled_from(JOBS), st.sampled_from(["site-a", "site-b"])),
    st.builds(_rejected, st.sampled_from(JOBS))), max_size=30)


def _fold(messages: list[tuple[int, object]], index: StudyIndex | None = None) -> StudyIndex:
    index = index or StudyIndex(name="s1")
    for seq, event in messages:
        index = state.apply(index, seq, event, site="site-a")
    return index


def test_a_deploy_command_is_found_by_its_launch_id_until_rejected_or_used() -> None:
    index = _fold([(1, CREATED), (2, _deploy("j-1")), (3, _deploy("j-2")),
                   (4, _deploy("j-3", site="site-b")), (5, _rejected("j-2"))])
    assert sorted(index.deploys) == ["j-1/site-a/client/0/0"]
    assert index.deploys["j-1/site-a/client/0/0"].seq == 2
    assert state.without(index, "j-1/site-a/client/0/0").deploys == {}
    # Published again later (an hour-later replay, a fresh message id): not indexed anew.
    again = state.apply(state.without(index, "j-1/site-a/client/0/0"), 9, _deploy("j-1"),
                        site="site-a", launched=lambda launch_id: launch_id.startswith("j-1"))
    assert again.deploys == {} and again.seq == 9


def test_membership_and_admins_follow_the_admin_events() -> None:
    index = _fold([(1, CREATED)])
    assert not index.has_site("site-a") and set(index.study.admins) == {"bob@b"}  # type: ignore[union-attr]
    index = _fold([(2, ADMIN_EVENTS[0]), (3, ADMIN_EVENTS[2])], index)
    assert index.has_site("site-a") and "eve@e" in index.study.admins  # type: ignore[union-attr]
    index = _fold([(4, ADMIN_EVENTS[1]), (5, ADMIN_EVENTS[3])], index)
    assert not index.has_site("site-a") and "eve@e" not in index.study.admins  # type: ignore[union-attr]


def test_a_deploy_delivered_again_after_a_failed_store_is_indexed_again() -> None:
    index = _fold([(1, CREATED), (2, _deploy("j-1")), (3, _deploy("j-2"))])
    lost = msgspec.structs.replace(index, deploys={})  # as a restart that missed them sees it
    assert state.apply(lost, 2, _deploy("j-1"), site="site-a").deploys == {}
    redelivered = state.apply(lost, 2, _deploy("j-1"), site="site-a", again=True)
    assert list(redelivered.deploys) == ["j-1/site-a/client/0/0"] and redelivered.seq == 3


@given(MESSAGES, st.data())
def test_two_in_order_feeders_count_each_message_once(messages: list[object],
                                                      data: st.DataObject) -> None:
    """The consumer and a catch-up read each feed the stream in order, from wherever they
    are, interleaved however: at every step the index is the fold of the stream up to the
    last message it applied, never an older state again (a removed admin stays removed)."""
    stream = [(seq, event) for seq, event in enumerate([CREATED, *messages], start=1)]
    prefixes = [StudyIndex(name="s1")]
    for seq, event in stream:
        prefixes.append(state.apply(prefixes[-1], seq, event, site="site-a"))
    index = StudyIndex(name="s1")
    behind = ahead = 0  # each feeder's position in the stream
    while behind < len(stream) or ahead < len(stream):
        if ahead < len(stream) and (behind == len(stream) or data.draw(st.booleans())):
            seq, event = stream[ahead]
            ahead += 1
        else:
            seq, event = stream[behind]
            behind += 1
        index = state.apply(index, seq, event, site="site-a")
        assert index == prefixes[index.seq]
    assert index == prefixes[-1]
