"""What a collector returns, and the guard that turns any failure into a recorded error."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ParamSpec

from cairn.snapshot.model import CollectorError, Reading

P = ParamSpec("P")


class ToolAbsent(Exception):
    """The tool or library a collector needs is not installed here (recorded, not failed)."""


@dataclass
class Collected:
    """Readings of this machine (flat `Type.Subtype.Key -> reading`) and partial failures."""

    readings: dict[str, Reading] = field(default_factory=dict)
    errors: list[CollectorError] = field(default_factory=list)


@dataclass
class ClusterCollected:
    """Readings of a whole cluster (Kubernetes, Slurm): site-level facts and per-node facts."""

    cluster: dict[str, Reading] = field(default_factory=dict)
    nodes: dict[str, dict[str, Reading]] = field(default_factory=dict)
    errors: list[CollectorError] = field(default_factory=list)


def _error(name: str, exc: BaseException) -> CollectorError:
    if isinstance(exc, ToolAbsent):
        return CollectorError(collector=name, message=str(exc), absent=True)
    text = str(exc) or "no message"
    return CollectorError(collector=name, message=f"{type(exc).__name__}: {text}")


def guarded(name: str) -> Callable[[Callable[P, Collected]], Callable[P, Collected]]:
    """Make a node collector total: an exception becomes a CollectorError named `name`."""

    def wrap(func: Callable[P, Collected]) -> Callable[P, Collected]:
        @functools.wraps(func)
        def run(*args: P.args, **kwargs: P.kwargs) -> Collected:
            try:
                return func(*args, **kwargs)
            except Exception as exc:  # a snapshot must survive any one broken source
                return Collected(errors=[_error(name, exc)])

        return run

    return wrap


def guarded_cluster(
    name: str,
) -> Callable[[Callable[P, ClusterCollected]], Callable[P, ClusterCollected]]:
    """`guarded` for cluster collectors."""

    def wrap(func: Callable[P, ClusterCollected]) -> Callable[P, ClusterCollected]:
        @functools.wraps(func)
        def run(*args: P.args, **kwargs: P.kwargs) -> ClusterCollected:
            try:
                return func(*args, **kwargs)
            except Exception as exc:  # a snapshot must survive any one broken source
                return ClusterCollected(errors=[_error(name, exc)])

        return run

    return wrap
