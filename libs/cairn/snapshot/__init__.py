"""Snapshots: what a site really is, as typed readings under AICR-style `Type.Subtype.Key`
paths (names listed in docs/snapshot.md).

    from cairn.snapshot import collect_local, diff, load
    snap = collect_local(site="site-a")
    snap.readings("node-1")["OS.release.ID"]
"""

from cairn.snapshot.model import (
    FORMAT,
    Change,
    CollectorError,
    Nested,
    NodeSnapshot,
    Reading,
    Snapshot,
    compute_digest,
    decode,
    diff,
    encode,
    flatten,
    load,
    make_snapshot,
    nest,
    parse_path,
)


def collect_local(site: str | None = None) -> Snapshot:
    """Snapshot this machine (see `cairn.snapshot.collect.collect_local` for the options)."""
    # Imported here so loading a snapshot file does not import every collector.
    from cairn.snapshot.collect import collect_local as collect

    return collect(site)


__all__ = [
    "FORMAT",
    "Change",
    "CollectorError",
    "Nested",
    "NodeSnapshot",
    "Reading",
    "Snapshot",
    "collect_local",
    "compute_digest",
    "decode",
    "diff",
    "encode",
    "flatten",
    "load",
    "make_snapshot",
    "nest",
    "parse_path",
]
