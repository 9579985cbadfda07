"""Snapshots over the bus: `site.snapshot` records (inline when small, in the object store
when not), asking a site's snapshotter, and reading a site's latest record."""

from __future__ import annotations

from typing import Any

import msgspec

from cairn import api, subjects
from cairn.bus import Bus, UndecodableRecord, last_stored, objects
from cairn.errors import InvalidInput
from cairn.events import FEDERATION_DECODER, SnapshotRecorded, stamp
from cairn.events.decoding import decode_with
from cairn.snapshot.model import Snapshot, decode, encode

INLINE_MAX_BYTES = 256 * 1024
"""Snapshots up to this size ride inside the event; larger ones go to the object store
(the default NATS message limit is 1 MiB, and a stream of hourly 1 MiB events grows fast)."""

ASK_TIMEOUT_S = 30.0
"""A snapshot may take up to 15 s to collect (the collectors' deadline), plus the bus."""


async def record(bus: Bus, snap: Snapshot, *, source: str, reason: str,
                 inline_max: int = INLINE_MAX_BYTES) -> SnapshotRecorded:
    """Build the `site.snapshot` event for `snap`, storing the JSON first when it is large."""
    assert snap.site is not None
    data = encode(snap)
    inline: dict[str, Any] | None = None
    object_name: str | None = None
    if len(data) <= inline_max:
        inline = msgspec.json.decode(data)
    else:
        store = await objects(bus, subjects.OBJ_SNAPSHOTS)
        object_name = await store.put(data)
    return SnapshotRecorded(**stamp(), source=source, site=snap.site, digest=snap.digest,
                            taken_at=snap.taken_at, nodes=len(snap.nodes),
                            object_name=object_name, snapshot=inline, reason=reason)


async def snapshot_of(bus: Bus, recorded: SnapshotRecorded) -> Snapshot:
    """The snapshot a record carries or points to (digest checked).

    Raises:
        InvalidInput: the record has neither, or the JSON does not match its digest.
        NotFound: the object is gone from the store.
    """
    if recorded.snapshot is not None:
        return decode(msgspec.json.encode(recorded.snapshot), source=f"record {recorded.id}")
    if not recorded.object_name:
        raise InvalidInput(f"snapshot record {recorded.id} carries no snapshot")
    store = await objects(bus, subjects.OBJ_SNAPSHOTS)
    return decode(await store.get(recorded.object_name), source=recorded.object_name)


async def ask(bus: Bus, site: str, timeout: float = ASK_TIMEOUT_S) -> Snapshot:
    """Ask the site's snapshotter for a fresh snapshot (it also records it in FEDERATION).

    Raises:
        Unavailable: no snapshotter answers; Timeout: it did not answer in time.
    """
    subject = subjects.site_snapshot_request(site)
    envelope = api.encode_envelope(api.Envelope(request=api.SnapshotNow()))
    result = api.decode_reply(await bus.request(subject, envelope, timeout=timeout),
                              subject=subject)
    if not isinstance(result, api.SnapshotTaken):
        raise InvalidInput(f"the snapshotter of {site} answered with {type(result).__name__}")
    event = result.recorded
    return await snapshot_of(bus, event)


async def latest_record(bus: Bus, site: str) -> SnapshotRecorded | None:
    """The site's last `site.snapshot` in FEDERATION (one direct read, not a replay).

    Raises:
        UndecodableRecord: the last message there is not an event (anyone may publish there).
    """
    stream = subjects.FEDERATION_STREAM.name
    found = await last_stored(bus, stream, subjects.site_event(site, "snapshot"))
    if found is None:
        return None
    try:
        event = decode_with(FEDERATION_DECODER, found.data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UndecodableRecord(f"the last snapshot record of {site} does not decode: {exc}",
                                store=stream, key=found.subject, seq=found.seq,
                                data=found.data, headers=found.headers) from None
    if not isinstance(event, SnapshotRecorded):
        raise UndecodableRecord(
            f"the last record on {found.subject} is a {type(event).__name__}, not a snapshot",
            store=stream, key=found.subject, seq=found.seq, data=found.data,
            headers=found.headers)
    return event


async def latest(bus: Bus, site: str) -> Snapshot | None:
    """The site's last recorded snapshot, or None."""
    recorded = await latest_record(bus, site)
    return None if recorded is None else await snapshot_of(bus, recorded)
