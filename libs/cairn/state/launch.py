"""A site launcher's launches: a pure fold over launch commands and the worker facts it
published. A launch id, once requested, is launched at most once; a launch never moves
backwards.

Per launch: requested -> launching -> running -> exited. A cancel marks it, it moves nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime

import msgspec

from cairn.events import (
    LaunchCancel,
    LaunchRequested,
    WorkerExited,
    WorkerLaunching,
    WorkerRunning,
    worker_ref,
)

# make_launch_id's home is cairn.events.workerref; it is still importable from here.
from cairn.events.workerref import WorkerLaunch
from cairn.events.workerref import make_launch_id as make_launch_id
from cairn.spec.causes import Cause

LAUNCH_ORDER = {"requested": 0, "launching": 1, "running": 2, "exited": 3}


class LaunchState(WorkerLaunch, frozen=True, kw_only=True):
    """One worker attempt as the launcher knows it (its key: `WorkerLaunch`).

    Attributes:
        state: `requested`, `launching`, `running` or `exited`.
        cancelled: A cancel arrived before it exited.
        cancel_cause: The cause a worker stopped by that cancel ends with, where it is not
            `cancelled`: `outlived-server` when the coordinator stopped a worker still
            running past its job's end grace, after the job's server role had finished.
        native_id: The backend's id of the worker, once running.
        exit_code: The reported exit code (None: unknown, or not exited).
        reason: The reported closed-set cause; None for a clean exit.
    """

    state: str = "requested"
    requested_at: datetime | None = None
    updated_at: datetime | None = None
    cancelled: bool = False
    cancel_cause: str | None = None
    native_id: str = ""
    exit_code: int | None = None
    reason: str | None = None
    message: str = ""

    @property
    def exited(self) -> bool:
        return self.state == "exited"


class Launches(msgspec.Struct, frozen=True, kw_only=True):
    """Every launch of one site, by launch id."""

    launches: dict[str, LaunchState] = {}

    def get(self, launch_id: str) -> LaunchState | None:
        return self.launches.get(launch_id)

    def live(self) -> list[LaunchState]:
        """Launches that have not exited, in launch-id order."""
        return [s for _, s in sorted(self.launches.items()) if not s.exited]


def _put(launches: Launches, state: LaunchState) -> Launches:
    return msgspec.structs.replace(launches, launches={**launches.launches,
                                                       state.launch_id: state})


def _advance(launches: Launches, launch_id: str, state: str, at: datetime,
             **changes: object) -> Launches:
    current = launches.launches.get(launch_id)
    if current is None or current.exited or LAUNCH_ORDER[state] < LAUNCH_ORDER[current.state]:
        return launches
    return _put(launches, msgspec.structs.replace(current, state=state, updated_at=at,
                                                  **changes))


def apply(launches: Launches, event: object) -> Launches:
    """Apply one event; events of other launches or kinds leave the state as it is."""
    match event:
        case LaunchRequested():
            if event.launch_id in launches.launches:
                return launches  # requested again (a replay): still the first request
            return _put(launches, LaunchState(
                **worker_ref(event).launch_fields(event.study or "", event.launch_id),
                requested_at=event.at, updated_at=event.at))
        case WorkerLaunching():
            return _advance(launches, event.launch_id, "launching", event.at)
        case WorkerRunning():
            return _advance(launches, event.launch_id, "running", event.at,
                            native_id=event.native_id)
        case LaunchCancel():
            current = launches.launches.get(event.launch_id)
            if current is None or current.exited or current.cancelled:
                return launches
            return _put(launches, msgspec.structs.replace(
                current, cancelled=True, cancel_cause=_STOP_CAUSES.get(event.reason),
                updated_at=event.at))
        case WorkerExited():
            return _advance(launches, event.launch_id, "exited", event.at,
                            exit_code=event.exit_code, reason=event.reason,
                            message=event.message)
    return launches


def fold(events: Iterable[object], initial: Launches | None = None) -> Launches:
    """`functools.reduce(apply, events, initial)`."""
    return functools.reduce(apply, events, initial or Launches())


def is_new(launches: Launches, launch_id: str) -> bool:
    """True when this launch id was never requested here: only then is it launched."""
    return launch_id not in launches.launches


# A cancel's reason that gives the stopped worker's end its own cause (any other: cancelled).
_STOP_CAUSES = {str(Cause.OUTLIVED_SERVER): str(Cause.OUTLIVED_SERVER)}


def exit_cause(launch: LaunchState, exit_code: int | None, cause: str | None) -> str | None:
    """The cause to report for how a backend saw a worker end.

    A clean exit is a clean exit, even after a cancel. A worker killed by a signal after a
    cancel arrived (the backend may not know, after a restart) ended by that cancel; one that
    failed on its own keeps its cause. A worker the cancel stopped ends with the cancel's
    cause: `cancelled`, or `outlived-server` for one stopped after its job's server finished.
    """
    if exit_code == 0:
        return None
    stopped = cause == "cancelled" or (cause in ("crashed", None)
                                       and (exit_code is None or exit_code >= 128))
    if launch.cancelled and stopped:
        return launch.cancel_cause or "cancelled"
    return cause


def exit_message(cause: str | None, message: str) -> str:
    """The backend's account of the end, prefixed with why Cairn stopped it where that is
    not a plain cancel."""
    if cause == Cause.OUTLIVED_SERVER:
        return f"stopped after the server role finished (past the job's end grace); {message}"
    return message


def unsupported(request: LaunchRequested, backend: str,
                capabilities: frozenset[str]) -> str | None:
    """Why this site's backend cannot run the request (for people), or None when it can.

    The agent refuses such a deployment first; this is the launcher's own check, for a
    request decided before the agent knew the backend.
    """
    if request.gpus and "gpu" not in capabilities:
        return (f"the worker asks for GPUs {', '.join(request.gpus)}, but this site's "
                f"{backend} backend has no gpu capability")
    if request.nodes > 1 and "multi-node" not in capabilities:
        return (f"the worker spans {request.nodes} nodes, but this site's {backend} backend "
                "has no multi-node capability")
    return None
