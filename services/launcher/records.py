"""What the launcher keeps in KV `launches_<site>`: a record per launch, keyed by the
deterministic launch id, and its index of the site's deploy commands.

Keys of launch records are launch ids (`<job>.<site>.<role>.<rank>.<attempt>`); the deploy
index lives beside them under keys that start with `_`, which no job id can (the name rule):
`_deploy.<study>.<launch key>` per deploy command not yet launched, and `_mark.<study>`,
how far into the study's stream the index has read (with the study's admins as of then).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from cairn.events import DeployCommand
from cairn.events.workerref import WorkerLaunch
from cairn.launcher.backends.base import LaunchHandle, WorkerExit
from cairn.state.study import StudyState

INDEX_PREFIX = "_"


class LaunchRecord(WorkerLaunch, frozen=True, kw_only=True):
    """What the launcher knows of one worker; a restarted launcher starts from these (its
    key: `WorkerLaunch`).

    Frozen: the launcher folds its launches with `cairn.state.launch` and writes a new record
    for each step (`msgspec.structs.replace`).

    Attributes:
        state: `launching` (record written, not yet started), `running` (handle known),
            `exited` (reported, or dead-lettered as unreportable).
        dead_lettered: Why its end could never be reported (its study is not this site's,
            the broker refused the report), once it was dead-lettered; "" otherwise. Such a
            record is done: it is reported once, not at every start.
    """

    state: Literal["launching", "running", "exited"] = "launching"
    handle: LaunchHandle | None = None
    exit: WorkerExit | None = None
    requested_at: datetime | None = None
    cancelled: bool = False
    dead_lettered: str = ""
    cancel_cause: str | None = None


class IndexedDeploy(msgspec.Struct, frozen=True, kw_only=True):
    """A deploy command for this site not launched yet, and where it is in its stream."""

    seq: int
    deploy: DeployCommand


class IndexMark(msgspec.Struct, frozen=True, kw_only=True):
    """How far into a study's stream the index has read and stored, and the study as its
    admin events made it by then (a restart folds on from here)."""

    seq: int
    study: StudyState | None = None


def kv_key(launch_id: str) -> str:
    """KV keys may not contain '/': the launch id's separators become '.'."""
    return launch_id.replace("/", ".")


def is_record_key(key: str) -> bool:
    return not key.startswith(INDEX_PREFIX)


def deploy_key(study: str, launch_id: str) -> str:
    return f"{INDEX_PREFIX}deploy.{study}.{kv_key(launch_id)}"


def deploy_prefix(study: str) -> str:
    return f"{INDEX_PREFIX}deploy.{study}."


def mark_key(study: str) -> str:
    return f"{INDEX_PREFIX}mark.{study}"
