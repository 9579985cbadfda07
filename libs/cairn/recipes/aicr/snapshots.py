"""AICR's snapshot document (kind `Snapshot`), read and written.

AICR's agent snapshots one node: `measurements` is a list of `{type, subtypes: [{subtype,
data, context}]}`, and `Type.Subtype.Key` paths read the same as Cairn's. Read into Cairn's
model, `K8s` readings are the cluster's and the rest one node's (named by `metadata.
source-node`, else `aicr-snapshot`). Written from Cairn's, the cluster's readings and one
node's (the first, or the one asked for) make the document, with that node named in
`metadata.source-node`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cairn import files, yamlfile
from cairn.errors import InvalidInput
from cairn.recipes.aicr.datadir import parse_yaml
from cairn.recipes.aicr.model import API_VERSION, API_VERSIONS, AicrConstraint
from cairn.recipes.aicr.resolve import ConstraintJudge
from cairn.recipes.model import Constraint
from cairn.snapshot import model
from cairn.snapshot.model import Reading, Snapshot

DEFAULT_NODE = "aicr-snapshot"
CLUSTER_TYPES = ("K8s",)


def is_aicr(data: Any) -> bool:
    """AICR's snapshot: `kind: Snapshot`, or no kind and a `measurements` list (AICR's
    header is optional, and hand-written snapshots often leave it out)."""
    if not isinstance(data, dict):
        return False
    kind = data.get("kind")
    return kind == "Snapshot" or (kind is None and isinstance(data.get("measurements"), list))


def is_aicr_file(path: Path) -> bool:
    """True when `path` holds an AICR snapshot document (`kind: Snapshot`), read bounded."""
    content = files.read_bytes(path, limit=model.MAX_SNAPSHOT_FILE_BYTES, shown=str(path))
    if b"measurements" not in content:
        return False
    try:
        return is_aicr(parse_yaml(content, str(path)).data)
    except InvalidInput:
        return False


def read_snapshot(path: Path) -> Snapshot:
    """A snapshot file in Cairn's format (`cairn snapshot --out`) or AICR's.

    Raises:
        InvalidInput: neither, or malformed (naming the file and field).
    """
    shown = str(path)
    content = files.read_bytes(path, limit=model.MAX_SNAPSHOT_FILE_BYTES, shown=shown)
    stripped = content.lstrip()
    if stripped.startswith(b"{") and b'"measurements"' not in content[:4096] \
            and b'"kind"' not in content[:4096]:
        return model.decode(content, source=shown, verify=False)
    doc = parse_yaml(content, shown)
    if not is_aicr(doc.data):
        if isinstance(doc.data, dict) and "taken_at" in doc.data:
            return model.decode(content, source=shown, verify=False)
        raise InvalidInput("not a snapshot: neither Cairn's (cairn snapshot --out) nor AICR's "
                           "(kind: Snapshot)", file=shown)
    return from_aicr(doc, shown)


def from_aicr(doc: yamlfile.YamlDocument, shown: str) -> Snapshot:
    data = doc.data
    api = data.get("apiVersion")
    if api is not None and api not in API_VERSIONS:
        raise InvalidInput(f"unknown apiVersion {api!r}; known: {', '.join(API_VERSIONS)}",
                           file=shown, line=doc.line_of(("apiVersion",)), field="apiVersion")
    meta = data.get("metadata") or {}
    if not isinstance(meta, dict):
        raise InvalidInput("metadata must be a mapping", file=shown, field="metadata")
    measurements = data.get("measurements") or []
    if not isinstance(measurements, list):
        raise InvalidInput("measurements must be a list", file=shown, field="measurements")
    cluster: dict[str, Reading] = {}
    node: dict[str, Reading] = {}
    for i, measurement in enumerate(measurements):
        at = f"measurements[{i}]"
        if not isinstance(measurement, dict) or not isinstance(measurement.get("type"), str):
            raise InvalidInput("a measurement needs a type", file=shown,
                               line=doc.line_of(("measurements", i)), field=f"{at}.type")
        type_ = measurement["type"]
        for j, subtype in enumerate(measurement.get("subtypes") or []):
            where = f"{at}.subtypes[{j}]"
            if not isinstance(subtype, dict) or not isinstance(subtype.get("data") or {}, dict):
                raise InvalidInput("a subtype needs a data mapping", file=shown,
                                   line=doc.line_of(("measurements", i, "subtypes", j)),
                                   field=where)
            name = str(subtype.get("subtype") or "")
            for key, value in (subtype.get("data") or {}).items():
                path = f"{type_}.{name}.{key}"
                (cluster if type_ in CLUSTER_TYPES else node)[path] = _reading(value)
    taken = meta.get("timestamp")
    try:
        taken_at = datetime.fromisoformat(str(taken).replace("Z", "+00:00")) if taken \
            else datetime.now(UTC)
    except ValueError:
        raise InvalidInput(f"metadata.timestamp {taken!r} is not a time", file=shown,
                           field="metadata.timestamp") from None
    node_name = str(meta.get("source-node") or DEFAULT_NODE)
    return model.make_snapshot(site=None, taken_at=taken_at, cluster=cluster,
                               nodes={node_name: node} if node else None)


def _reading(value: Any) -> Reading:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return str(value)


def to_aicr(snapshot: Snapshot, node: str | None = None) -> dict[str, Any]:
    """Cairn's snapshot as AICR's document (see the module docstring).

    Raises:
        NotFound: `node` is not in the snapshot.
    """
    flat = dict(model.flatten(snapshot.cluster))
    chosen = snapshot.node(node) if node is not None else \
        (snapshot.nodes[0] if snapshot.nodes else None)
    if chosen is not None:
        flat.update(model.flatten(chosen))
    types: dict[str, dict[str, dict[str, Reading]]] = {}
    for path, value in flat.items():
        type_, subtype, key = model.parse_path(path)
        types.setdefault(type_, {}).setdefault(subtype, {})[key] = value
    meta = {"timestamp": snapshot.taken_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if chosen is not None:
        meta["source-node"] = chosen.node
    if snapshot.site:
        meta["site"] = snapshot.site
    return {"kind": "Snapshot", "apiVersion": API_VERSION, "metadata": meta,
            "measurements": [{"type": t, "subtypes": [{"subtype": s, "data": d}
                                                      for s, d in subtypes.items()]}
                             for t, subtypes in types.items()]}


def snapshot_judge(path: Path) -> ConstraintJudge:
    """Judges an overlay's constraint against a snapshot file (for excluded overlays)."""
    from cairn.recipes.nodes import judge_on_nodes, node_readings

    nodes = node_readings(read_snapshot(path))

    def judge(constraint: AicrConstraint) -> tuple[bool, str]:
        result = judge_on_nodes(Constraint(name=constraint.name, value=constraint.value),
                                nodes, {})
        actual = "" if result.actual is None else str(result.actual)
        return result.status == "passed", actual or result.message

    return judge
