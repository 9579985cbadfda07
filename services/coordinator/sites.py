"""What the coordinator knows of every site at one moment, judged only where asked.

A decision looks at the few sites its job names, but a federation has thousands: building
every site's `SiteStatus` for every decision made each decision cost as much as the whole
federation. `SiteBoard` is the `Context.sites` mapping that judges a site (`site_status`)
the first time a decision asks for it, and remembers the answer for that moment.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime

from cairn.coordinator.decide import SiteStatus, site_status
from cairn.events import Heartbeat


class SiteBoard(Mapping[str, SiteStatus]):
    """Every known site (federation members and those heard from) -> its status at `now`."""

    def __init__(self, members: Mapping[str, str],
                 heartbeats: Mapping[str, tuple[Heartbeat, datetime]], now: datetime, *,
                 stale_s: float, lost_s: float, since: datetime) -> None:
        self._members = members
        self._heartbeats = heartbeats
        self._now = now
        self._stale_s = stale_s
        self._lost_s = lost_s
        self._since = since
        self._judged: dict[str, SiteStatus] = {}

    def __getitem__(self, name: str) -> SiteStatus:
        judged = self._judged.get(name)
        if judged is not None:
            return judged
        if name not in self._members and name not in self._heartbeats:
            raise KeyError(name)
        hb, seen = self._heartbeats.get(name, (None, None))
        judged = site_status(hb, seen, self._now, stale_s=self._stale_s, lost_s=self._lost_s,
                             name=name, since=self._since)
        self._judged[name] = judged
        return judged

    def __iter__(self) -> Iterator[str]:
        yield from self._members
        yield from (name for name in self._heartbeats if name not in self._members)

    def __len__(self) -> int:
        return len(self._members) + sum(1 for n in self._heartbeats if n not in self._members)

    def __contains__(self, name: object) -> bool:
        return name in self._members or name in self._heartbeats
