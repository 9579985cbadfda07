"""Facts of the federation's seed that services need: who its project admins are."""

from __future__ import annotations

from cairn import subjects
from cairn.bus import Bus
from cairn.events import FEDERATION_DECODER, FederationSeeded


async def project_admin(bus: Bus) -> str | None:
    """The first project admin of `federation.seeded`: the actor services act as when they
    submit jobs of their own (check jobs, collection jobs); None before the seed."""
    found = await bus.last_message(subjects.FEDERATION_STREAM.name, subjects.fed("seeded"))
    if found is None:
        return None
    seeded = FEDERATION_DECODER.decode(found[2])
    if isinstance(seeded, FederationSeeded):
        admins = [a.name for a in seeded.admins if a.role == "project_admin"]
        return admins[0] if admins else None
    return None
