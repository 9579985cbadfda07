"""The snapshot model: what a site really is, as typed readings under `Type.Subtype.Key` paths.

A path follows AICR's measurement model: the parser splits on the first two dots only, so a
key may itself hold dots or slashes (`OS.sysctl./proc/sys/kernel/osrelease`). Every name
Cairn emits is listed in docs/snapshot.md.

A snapshot carries a `digest`: sha256 over the canonical JSON (sorted keys, no whitespace) of
every field except `digest`. Nodes and errors are put in a canonical order when a snapshot is
built, so the digest depends on content only, never on collection order.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from cairn.errors import InvalidInput, NotFound
from cairn.events.decoding import decode_with
from cairn.files import MIB, read_bytes
from cairn.names import check_name

Reading = str | int | float | bool | list[str]
"""One measured value. Lists are kept in the order the collector gives (sorted where it can)."""

Nested = dict[str, dict[str, dict[str, Reading]]]
"""Readings as Type -> Subtype -> Key -> value (the stored shape)."""

FORMAT = 1
MAX_SNAPSHOT_FILE_BYTES = 64 * MIB
"""A snapshot file `cairn diff` and `cairn snapshot` read (a large cluster's is a few MiB)."""


class CollectorError(msgspec.Struct, frozen=True, kw_only=True):
    """A collector that failed or whose tool is absent; the snapshot is still produced."""

    collector: str
    message: str
    absent: bool = False
    """True when the tool or library is not installed (e.g. "nvidia-smi not found"): the
    collector had nothing to ask, which is different from asking and getting zero."""


class NodeSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Readings of one machine (a host, a Kubernetes node, a Slurm node seen from itself)."""

    node: str
    measurements: Nested = msgspec.field(default_factory=dict)
    errors: list[CollectorError] = msgspec.field(default_factory=list)


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """What one site is at one moment. Build with `make_snapshot` so the digest is right."""

    format: int = FORMAT
    site: str | None = None
    taken_at: datetime
    cluster: Nested = msgspec.field(default_factory=dict)
    """Facts about the site as a whole: K8s.server.*, Slurm.*."""
    nodes: list[NodeSnapshot] = msgspec.field(default_factory=list)
    errors: list[CollectorError] = msgspec.field(default_factory=list)
    """Cluster-level collector errors (a Kubernetes API or Slurm controller that failed)."""
    digest: str = ""

    def node(self, name: str) -> NodeSnapshot:
        for entry in self.nodes:
            if entry.node == name:
                return entry
        raise NotFound(f"snapshot has no node {name!r}", field="node")

    def readings(self, node: str | None = None) -> dict[str, Reading]:
        """Flat `path -> reading` of one node, or of the cluster when `node` is None."""
        return flatten(self.cluster if node is None else self.node(node))


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One reading that differs between two snapshots (None: absent on that side)."""

    path: str
    node: str | None
    before: Reading | None
    after: Reading | None


def parse_path(path: str) -> tuple[str, str, str]:
    """Split `Type.Subtype.Key` on its first two dots (the key may hold more dots).

    Raises:
        InvalidInput: when the path has fewer than three non-empty parts.
    """
    parts = path.split(".", 2)
    if len(parts) != 3 or not all(parts):
        raise InvalidInput(f"{path!r} is not a measurement path (Type.Subtype.Key)", field="path")
    return parts[0], parts[1], parts[2]


def nest(flat: Mapping[str, Reading]) -> Nested:
    """Turn `path -> reading` into Type -> Subtype -> Key -> reading."""
    out: Nested = {}
    for path, value in flat.items():
        type_, subtype, key = parse_path(path)
        out.setdefault(type_, {}).setdefault(subtype, {})[key] = value
    return out


def flatten(source: NodeSnapshot | Nested) -> dict[str, Reading]:
    """Flat, path-sorted `Type.Subtype.Key -> reading` of a node or of a cluster dict."""
    nested = source.measurements if isinstance(source, NodeSnapshot) else source
    flat = {
        f"{type_}.{subtype}.{key}": value
        for type_, subtypes in nested.items()
        for subtype, keys in subtypes.items()
        for key, value in keys.items()
    }
    return dict(sorted(flat.items()))


def _error_key(error: CollectorError) -> tuple[str, str]:
    return (error.collector, error.message)


def make_snapshot(
    *,
    site: str | None,
    taken_at: datetime | None = None,
    cluster: Mapping[str, Reading] | None = None,
    nodes: Mapping[str, Mapping[str, Reading]] | None = None,
    node_errors: Mapping[str, list[CollectorError]] | None = None,
    errors: list[CollectorError] | None = None,
) -> Snapshot:
    """Build a snapshot from flat readings, in canonical order, with its digest set."""
    if site is not None:
        check_name(site, "site")
    node_errors = node_errors or {}
    names = sorted(set(nodes or {}) | set(node_errors))
    node_list = [
        NodeSnapshot(
            node=name,
            measurements=nest((nodes or {}).get(name, {})),
            errors=sorted(node_errors.get(name, []), key=_error_key),
        )
        for name in names
    ]
    when = (taken_at or datetime.now(UTC)).astimezone(UTC)
    draft = Snapshot(
        site=site,
        taken_at=when,
        cluster=nest(cluster or {}),
        nodes=node_list,
        errors=sorted(errors or [], key=_error_key),
    )
    return msgspec.structs.replace(draft, digest=compute_digest(draft))


def _canonical(snapshot: Snapshot) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(snapshot)
    data.pop("digest", None)
    # Order-independence: a list of nodes or errors is a set in meaning.
    data["nodes"] = sorted(data["nodes"], key=lambda n: n["node"])
    for entry in data["nodes"]:
        entry["errors"] = sorted(entry["errors"], key=lambda e: (e["collector"], e["message"]))
    data["errors"] = sorted(data["errors"], key=lambda e: (e["collector"], e["message"]))
    return data


def compute_digest(snapshot: Snapshot) -> str:
    """sha256 hex of the canonical JSON of everything but `digest` (sorted keys)."""
    blob = msgspec.json.encode(_canonical(snapshot), order="sorted")
    return hashlib.sha256(blob).hexdigest()


def encode(snapshot: Snapshot) -> bytes:
    """JSON bytes of a snapshot (sorted keys, so equal snapshots give equal bytes)."""
    return msgspec.json.encode(snapshot, order="sorted")


_DECODER = msgspec.json.Decoder(Snapshot)


def decode(data: bytes | str, *, source: str = "<snapshot>", verify: bool = True) -> Snapshot:
    """Decode snapshot JSON.

    Raises:
        InvalidInput: naming `source`, when the JSON is malformed, does not fit the model, or
            (with `verify`) its digest does not match its content.
    """
    try:
        snapshot = decode_with(_DECODER, data)
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"not a snapshot: {exc}", file=source) from None
    if snapshot.format != FORMAT:
        raise InvalidInput(f"unsupported snapshot format {snapshot.format}", file=source)
    if verify and snapshot.digest != compute_digest(snapshot):
        raise InvalidInput("digest does not match content (file altered?)", file=source)
    return snapshot


def load(path: str | Path, *, verify: bool = True) -> Snapshot:
    """Read and decode a snapshot file; every failure is an InvalidInput naming the file."""
    return decode(read_bytes(path, limit=MAX_SNAPSHOT_FILE_BYTES), source=str(path),
                  verify=verify)


def _same(a: Reading | None, b: Reading | None) -> bool:
    # Type matters: True == 1 and 1 == 1.0 in Python, but they are different readings.
    return type(a) is type(b) and a == b


def _diff_flat(
    before: Mapping[str, Reading],
    after: Mapping[str, Reading],
    node: str | None,
    ignore: Sequence[str],
) -> list[Change]:
    return [
        Change(path=path, node=node, before=before.get(path), after=after.get(path))
        for path in sorted(set(before) | set(after))
        if not _same(before.get(path), after.get(path))
        and not any(fnmatch.fnmatchcase(path, pattern) for pattern in ignore)
    ]


def diff(a: Snapshot, b: Snapshot, *, ignore: Sequence[str] = ()) -> list[Change]:
    """Readings added, removed or changed from `a` to `b`: cluster first, then nodes by name.

    Args:
        ignore: glob patterns of paths to leave out (e.g. "Memory.info.available-bytes",
            which moves from one moment to the next).
    """
    changes = _diff_flat(flatten(a.cluster), flatten(b.cluster), None, ignore)
    nodes_a = {n.node: n for n in a.nodes}
    nodes_b = {n.node: n for n in b.nodes}
    for name in sorted(set(nodes_a) | set(nodes_b)):
        flat_a = flatten(nodes_a[name]) if name in nodes_a else {}
        flat_b = flatten(nodes_b[name]) if name in nodes_b else {}
        changes.extend(_diff_flat(flat_a, flat_b, name, ignore))
    return changes
