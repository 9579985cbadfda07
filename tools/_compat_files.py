"""Layouts as public surfaces: the data plane, each deployer's bundle, the evidence bundle.

Each is described from the code that writes it, never restated:

- the data plane: its subjects and stream, the headers of every message, the envelope's
  kinds and codecs (the envelope's fields are `schemas/data/envelope.json`, held by
  `make check-schemas`), and where a job's files and an object store keep an object's meta
  record and chunks, with the meta record's fields;
- a bundle per deployer: a reference plan (a chart from an HTTP repository, one from an OCI
  registry) rendered and signed for each deployer, every file's path with component and
  repository names as `{component}` and `{repository}`, and what each file is (the
  Kubernetes kinds in it, else its format); the manifest's and provenance file's schemas;
- the evidence bundle: a real bundle built and signed, the same way.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

import msgspec
import yaml

from cairn import subjects
from cairn.bundles import (
    DEPLOYERS,
    BundleManifest,
    BundlePlan,
    GitTarget,
    PlannedComponent,
    ProvenanceFile,
    render_files,
)
from cairn.bundles.model import BUNDLE_FORMAT, K0rdentTarget
from cairn.bundles.sources import repositories
from cairn.bus import _connection as bus_connection
from cairn.bus._chunks import CHUNK_HEADER
from cairn.bus._objects import job_files_layout, meta_record, object_store_layout
from cairn.evidence import bundle, dsse, statement
from cairn.evidence.keys import SigningKey
from cairn.snapshot import Snapshot, make_snapshot
from cairn.worker import dataplane

# Valid names no literal token of a subject equals; written back as `{name}`.
_STUDY, _JOB, _ROLE, _TOPIC, _SITE = "x-study", "x-job", "x-role", "x-topic", "x-site"
_DIGEST, _NUID, _BUCKET, _RANK = "0" * 64, "x-nuid", "x-bucket", 7
_PLACES = {_STUDY: "{study}", _JOB: "{job}", _ROLE: "{role}", _TOPIC: "{topic}",
           _SITE: "{site}", _DIGEST: "{digest}", _NUID: "{nuid}", _BUCKET: "{bucket}",
           str(_RANK): "{rank}"}

_HTTP, _OCI = "x-http-component", "x-oci-component"


def reference_plan(deployer: str) -> BundlePlan:
    """A bundle plan with one chart from an HTTP repository and one from an OCI registry, so
    every kind of file a bundle can hold is written, whatever the catalog's recipes hold."""
    components = [
        PlannedComponent(name=_HTTP, chart="x-repo/x-chart", repository="https://x.example/c",
                         version="1.0.0", namespace="x-ns", values={"x": {"enabled": True}}),
        PlannedComponent(name=_OCI, chart="x-oci-chart", repository="oci://x.example/charts",
                         version="2.0.0", namespace="x-ns", dependencies=[_HTTP], wave=1,
                         values={"y": 1}),
    ]
    # A k0rdent bundle also says which clusters it is for (from the criteria, or given).
    target = (K0rdentTarget(cluster_selector={"cairn.dev/accelerator": "x-gpu"})
              if deployer == "k0rdent" else None)
    manifest = BundleManifest(recipe="x-recipe", applied=["overlays/base.yaml"],
                              deployer=deployer,  # type: ignore[arg-type]
                              components=components, k0rdent=target)
    return BundlePlan(manifest=manifest, provenance=ProvenanceFile(recipe="x-recipe", values=[]))


def _unplace(text: str, sep: str = ".") -> str:
    return sep.join(_PLACES.get(token, token) for token in text.split(sep))


def _kinds(values: list[str]) -> dict[str, bool]:
    return {value: True for value in sorted(values)}


def dataplane_layout() -> dict[str, Any]:
    """The data plane's subjects, headers, envelope values and object layouts."""
    files = job_files_layout(_STUDY, _JOB)
    payloads = job_files_layout(_STUDY, _JOB, payloads=True)
    store = object_store_layout(_BUCKET)
    name_token = base64.urlsafe_b64encode(b"name").decode()
    record = meta_record("name", _BUCKET, _NUID, 1, hashlib.sha256(b"x").digest(), 1)
    return {
        "subjects": {
            "worker": _unplace(dataplane.worker_address(_STUDY, _JOB, _ROLE, _RANK, _TOPIC)),
            "broadcast": _unplace(dataplane.broadcast_address(_STUDY, _JOB, _TOPIC)),
        },
        "stream": _unplace(subjects.data_stream(_STUDY).name, "_"),
        "headers": {
            bus_connection.MSG_ID: "the envelope's id (the stream drops a repeat)",
            bus_connection.CONTENT_TYPE: bus_connection.MSGPACK,
        },
        "envelope": {
            "schema": "schemas/data/envelope.json",
            "encoding": bus_connection.MSGPACK,
            "kinds": _kinds(list(dataplane.KINDS)),
            "codecs": _kinds(list(dataplane.CODECS)),
            "numpy_extension": dataplane.NDARRAY_EXT,
        },
        "job_files": {
            "stream": _unplace(files.stream, "_"),
            "meta": _unplace(files.meta(_DIGEST)),
            "chunks": _unplace(files.chunks(_DIGEST, _NUID)),
        },
        "job_payloads": {
            "stream": _unplace(payloads.stream, "_"),
            "meta": _unplace(payloads.meta(_DIGEST)),
            "chunks": _unplace(payloads.chunks(_DIGEST, _NUID)),
            "chunk_header": CHUNK_HEADER,
        },
        "object_store": {
            "stream": _unplace(store.stream, "_"),
            "meta": _unplace(store.meta("name")).replace(name_token, "{base64url name}"),
            "chunks": _unplace(store.chunks("name", _NUID)),
        },
        "meta_record": {key: type(value).__name__ for key, value in sorted(record.items())},
    }


# -- files -------------------------------------------------------------------------------------

def _what(path: str, data: bytes) -> list[str]:
    """What a file is: the Kubernetes kinds of its documents, else its format."""
    suffix = PurePosixPath(path).suffix
    if suffix in (".yaml", ".yml"):
        kinds = [f"{doc['apiVersion']}/{doc['kind']}"
                 for doc in yaml.safe_load_all(data)
                 if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc]
        return sorted(set(kinds)) or ["yaml"]
    if suffix == ".json":
        doc = json.loads(data)
        return [str(doc["payloadType"]) if isinstance(doc, dict) and "payloadType" in doc
                else "json"]
    return {".sh": ["shell script"], ".md": ["markdown"], ".txt": ["text"]}.get(suffix,
                                                                                ["bytes"])


def _pattern(path: str, names: Mapping[str, str]) -> str:
    """`path` with the names a rendering chose written as `{component}`, `{repository}`."""
    *folders, name = path.split("/")
    stem, dot, ext = name.partition(".")
    for prefix, suffix in (("", ""), ("repo-", ""), ("", "-oci")):
        inner = stem.removeprefix(prefix).removesuffix(suffix)
        if stem.startswith(prefix) and stem.endswith(suffix) and inner in names:
            stem = f"{prefix}{{{names[inner]}}}{suffix}"
            break
    folders = [f"{{{names[f]}}}" if f in names else f for f in folders]
    return "/".join([*folders, stem + dot + ext])


def file_layout(files: Mapping[str, bytes], names: Mapping[str, str]) -> dict[str, Any]:
    """Every file pattern with what it is (merged over the files it stands for)."""
    out: dict[str, dict[str, bool]] = {}
    for path, data in sorted(files.items()):
        kinds = _what(path, data)
        out.setdefault(_pattern(path, names), {}).update(_kinds(kinds))
    return {pattern: {"kinds": kinds} for pattern, kinds in sorted(out.items())}


def bundle_layouts() -> dict[str, Any]:
    """Per deployer, the files of a signed bundle of the reference plan; the schemas of the
    files `cairn bundle diff` and `explain` read back."""
    key = SigningKey.generate()
    git = GitTarget(repo_url="https://git.example.com/clusters.git", path="clusters/gpu")
    deployers: dict[str, Any] = {}
    for deployer in DEPLOYERS:
        plan = reference_plan(deployer)
        components = list(plan.manifest.components)
        names = {c.name: "component" for c in components}
        names.update({r.alias: "repository" for r in repositories(components).values()})
        files = render_files(plan, git, sign_with=key)
        deployers[deployer] = {"files": file_layout(files, names)}
    return {"format": BUNDLE_FORMAT, "deployers": deployers,
            "schemas": {"bundle.yaml": msgspec.json.schema(BundleManifest),
                        "provenance.yaml": msgspec.json.schema(ProvenanceFile)}}


def evidence_layout() -> dict[str, Any]:
    """The files of a signed evidence bundle, its manifest and the schemas of its statement."""
    when = datetime(2026, 1, 1, tzinfo=UTC)
    snap = make_snapshot(site=_SITE, taken_at=when, nodes={"node-0": {"CPU.info.cores": 8}})
    phases = ("x-phase-a", "x-phase-b")
    outcome = bundle.ValidationOutcome(
        site=_SITE, recipe="x-recipe", resolved={"name": "x-recipe"}, snapshot=snap,
        ctrf={p: {"results": {"tool": {"name": "cairn"}, "tests": []}} for p in phases},
        phases={p: "passed" for p in phases}, passed=True, validated_at=when)
    files = bundle.build_bundle(outcome, [SigningKey.generate()])
    names = {p: "phase" for p in phases}
    manifest = json.loads(files[bundle.MANIFEST])
    return {
        "files": file_layout(files, names),
        "manifest": {"format": manifest["format"], "keys": _kinds(list(manifest))},
        "statement": {"type": statement.STATEMENT_TYPE,
                      "predicate_type": statement.TEST_RESULT_PREDICATE,
                      "cairn_predicate": statement.CAIRN_PREDICATE,
                      "payload_type": dsse.IN_TOTO_PAYLOAD_TYPE},
        "tarball": "gzip, POSIX pax, fixed metadata: equal bundles pack to equal bytes",
        "schemas": {"attestation.dsse.json": msgspec.json.schema(dsse.Envelope),
                    "snapshot.json": msgspec.json.schema(Snapshot),
                    "statement": msgspec.json.schema(statement.Statement)},
    }
