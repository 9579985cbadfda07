"""The snapshot model: paths, flattening, digest, encode/decode, diff."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.errors import InvalidInput, InvalidName, NotFound
from cairn.snapshot import (
    Change,
    CollectorError,
    Snapshot,
    decode,
    diff,
    encode,
    flatten,
    load,
    make_snapshot,
    parse_path,
)

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
NODE = {
    "OS.release.ID": "ubuntu",
    "OS.release.VERSION_ID": "24.04",
    "OS.sysctl./proc/sys/kernel/osrelease": "6.8.0-1024-aws",
    "GPU.smi.gpu-count": 8,
    "GPU.gpu0.power-limit-watts": 700.0,
    "GPU.hardware.gpu-present": True,
    "Container.docker.runtimes": ["nvidia", "runc"],
}


def snap(**overrides: object) -> Snapshot:
    args: dict[str, object] = {
        "site": "site-a",
        "taken_at": WHEN,
        "cluster": {"Slurm.cluster.version": "22.05.8"},
        "nodes": {"n1": NODE},
    }
    args.update(overrides)
    return make_snapshot(**args)  # type: ignore[arg-type]


def test_parse_path_splits_on_the_first_two_dots_only() -> None:
    assert parse_path("OS.sysctl./proc/sys/kernel/osrelease") == (
        "OS",
        "sysctl",
        "/proc/sys/kernel/osrelease",
    )
    assert parse_path("GPU.smi.gpu.model") == ("GPU", "smi", "gpu.model")
    assert parse_path("K8s.label.nvidia.com/gpu.product") == (
        "K8s",
        "label",
        "nvidia.com/gpu.product",
    )


@pytest.mark.parametrize("bad", ["OS", "OS.release", "OS..ID", ".a.b", ""])
def test_parse_path_rejects_short_paths(bad: str) -> None:
    with pytest.raises(InvalidInput):
        parse_path(bad)


def test_readings_round_trip_through_the_nested_shape() -> None:
    s = snap()
    assert s.readings("n1") == dict(sorted(NODE.items()))
    assert s.readings() == {"Slurm.cluster.version": "22.05.8"}
    assert s.nodes[0].measurements["OS"]["sysctl"]["/proc/sys/kernel/osrelease"] == "6.8.0-1024-aws"
    assert flatten(s.nodes[0]) == s.readings("n1")
    with pytest.raises(NotFound):
        s.readings("nope")


def test_digest_is_stable_and_ignores_key_and_node_order() -> None:
    errors = [
        CollectorError(collector="gpu", message="b"),
        CollectorError(collector="docker", message="a"),
    ]
    one = snap(nodes={"n1": NODE, "n2": {"CPU.info.cores": 4}}, node_errors={"n1": errors})
    reversed_node = dict(reversed(list(NODE.items())))
    two = snap(
        nodes={"n2": {"CPU.info.cores": 4}, "n1": reversed_node},
        node_errors={"n1": list(reversed(errors))},
    )
    assert one.digest == two.digest
    assert len(one.digest) == 64
    assert encode(one) == encode(two)


def test_digest_changes_with_content() -> None:
    changed = dict(NODE, **{"GPU.smi.gpu-count": 7})
    assert snap().digest != snap(nodes={"n1": changed}).digest
    # True and 1 are different readings, and so are 1 and 1.0.
    assert snap(nodes={"n1": {"A.b.c": True}}).digest != snap(nodes={"n1": {"A.b.c": 1}}).digest
    assert snap(nodes={"n1": {"A.b.c": 1}}).digest != snap(nodes={"n1": {"A.b.c": 1.0}}).digest


def test_encode_decode_is_the_identity_and_keeps_reading_types() -> None:
    s = snap()
    back = decode(encode(s))
    assert back == s
    readings = back.readings("n1")
    assert readings["GPU.smi.gpu-count"] == 8 and type(readings["GPU.smi.gpu-count"]) is int
    assert type(readings["GPU.gpu0.power-limit-watts"]) is float
    assert readings["GPU.hardware.gpu-present"] is True
    assert readings["Container.docker.runtimes"] == ["nvidia", "runc"]


reading = st.one_of(
    st.text(max_size=8),
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.text(max_size=5), max_size=3),
)
path = st.from_regex(r"[A-Z][a-z]{0,4}\.[a-z]{1,5}\.[a-z./]{1,8}", fullmatch=True)


@given(st.dictionaries(path, reading, max_size=8))
def test_any_readings_survive_encode_decode(readings: dict[str, object]) -> None:
    s = snap(nodes={"n1": readings})
    back = decode(encode(s))
    assert back.digest == s.digest
    assert {k: (type(v), v) for k, v in back.readings("n1").items()} == {
        k: (type(v), v) for k, v in s.readings("n1").items()
    }


def test_decode_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(InvalidInput) as err:
        load(bad)
    assert str(bad) in str(err.value)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"format": 1, "taken_at": 5}')
    with pytest.raises(InvalidInput, match=r"wrong\.json"):
        load(wrong)
    with pytest.raises(InvalidInput, match=r"missing\.json"):
        load(tmp_path / "missing.json")


def test_an_altered_file_fails_its_digest(tmp_path: Path) -> None:
    data = msgspec.json.decode(encode(snap()))
    data["nodes"][0]["measurements"]["GPU"]["smi"]["gpu-count"] = 4
    file = tmp_path / "edited.json"
    file.write_bytes(msgspec.json.encode(data))
    with pytest.raises(InvalidInput, match="digest"):
        load(file)
    assert load(file, verify=False).readings("n1")["GPU.smi.gpu-count"] == 4


def test_site_obeys_the_name_rule() -> None:
    with pytest.raises(InvalidName):
        snap(site="Site.A")


def test_diff_reports_added_removed_and_changed_in_order() -> None:
    a = snap(nodes={"n1": NODE, "n0": {"CPU.info.cores": 4}})
    b_node = dict(NODE)
    b_node.pop("OS.release.VERSION_ID")
    b_node["GPU.smi.gpu-count"] = 7
    b_node["OS.kmod.nvidia"] = True
    b = snap(cluster={"Slurm.cluster.version": "23.02.1"}, nodes={"n1": b_node, "n2": {"X.y.z": 1}})
    assert diff(a, b) == [
        Change(path="Slurm.cluster.version", node=None, before="22.05.8", after="23.02.1"),
        Change(path="CPU.info.cores", node="n0", before=4, after=None),
        Change(path="GPU.smi.gpu-count", node="n1", before=8, after=7),
        Change(path="OS.kmod.nvidia", node="n1", before=None, after=True),
        Change(path="OS.release.VERSION_ID", node="n1", before="24.04", after=None),
        Change(path="X.y.z", node="n2", before=None, after=1),
    ]
    assert diff(a, a) == []
    assert [c.path for c in diff(a, b, ignore=["GPU.*", "Slurm.*", "OS.*"])] == [
        "CPU.info.cores",
        "X.y.z",
    ]


def test_diff_sees_a_type_change() -> None:
    a = snap(nodes={"n1": {"A.b.c": 1}})
    b = snap(nodes={"n1": {"A.b.c": True}})
    assert diff(a, b) == [Change(path="A.b.c", node="n1", before=1, after=True)]
