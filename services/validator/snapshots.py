"""The snapshot a validation is judged on: a fresh one from the site's snapshotter, else the
latest the site recorded in FEDERATION, else none (and every reading is then missing).
"""

from __future__ import annotations

import logging

from cairn import subjects
from cairn.bus import Bus, objects
from cairn.errors import CairnError
from cairn.snapshot import Snapshot, encode, remote

log = logging.getLogger("cairn.validator")

ASK_TIMEOUT_S = remote.ASK_TIMEOUT_S
ask = remote.ask
latest = remote.latest


async def site_snapshot(bus: Bus, site: str, *, fresh: bool = True) -> tuple[Snapshot | None, str]:
    """(snapshot, where it came from): fresh when asked and the snapshotter answers."""
    if fresh:
        try:
            return await ask(bus, site), "fresh from the site's snapshotter"
        except CairnError as exc:
            log.info("no fresh snapshot of %s (%s): using the latest recorded", site, exc)
    snap = await latest(bus, site)
    return snap, ("latest recorded in FEDERATION" if snap else "none: the site has no snapshot")


async def store(bus: Bus, snap: Snapshot) -> str:
    """Keep the judged snapshot in the `snapshots` store; returns its object name."""
    return await (await objects(bus, subjects.OBJ_SNAPSHOTS)).put(encode(snap))
