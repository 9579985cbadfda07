"""The committed schemas are the public contract: current, complete, and guarded by the check."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cairn.events import event_types, tag_of
from tools._schemas import CHANNELS, SERVICES, writer_of
from tools.export_schemas import generate

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"
CHECK = REPO / "tools" / "check_schemas.py"


def run_check(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), "--schemas", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )


def load(folder: Path, tag: str) -> dict[str, Any]:
    return dict(json.loads((folder / "events" / f"{tag}.json").read_text()))


def save(folder: Path, tag: str, schema: dict[str, Any]) -> None:
    (folder / "events" / f"{tag}.json").write_text(json.dumps(schema, indent=2) + "\n")


def top(schema: dict[str, Any]) -> dict[str, Any]:
    """The event's own definition inside its schema file."""
    return dict(schema["$defs"][schema["$ref"].rsplit("/", 1)[-1]])


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    """A copy of the committed schemas to doctor (as if committed before a code change)."""
    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, copy)
    return copy


def test_committed_schemas_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(CHECK)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_export_is_deterministic_and_covers_every_event_type() -> None:
    first, second = generate(), generate()
    assert first == second
    tags = [tag_of(t) for t in event_types()]
    assert sorted(p for p in first if p.startswith("events/")) == [f"events/{t}.json" for t in tags]
    assert all(text.endswith("\n") for text in first.values())
    index = json.loads(first["index.json"])["events"]
    assert set(index) == set(tags)
    assert index["job.submitted"]["stream"] == "STUDY_{study}"
    assert index["launch.requested"]["stream"] == "SITE_{site}"
    assert index["site.heartbeat"]["stream"] is None  # kept in KV, not a stream


def _resolve(doc: dict[str, Any], ref: str) -> Any:
    node: Any = doc
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def test_asyncapi_names_every_channel_message_and_writer() -> None:
    doc = yaml.safe_load(generate()["asyncapi.yaml"])
    assert doc["asyncapi"] == "3.0.0"
    addresses = {c["address"] for c in doc["channels"].values()}
    assert {c.address for c in CHANNELS} == addresses
    assert "cairn.study.{study}.job.{job}.worker.{site}.{role}.{event}" in addresses
    for channel in doc["channels"].values():
        params = {t[1:-1] for t in channel["address"].split(".") if t.startswith("{")}
        assert set(channel.get("parameters", {})) == params
    assert set(doc["components"]["messages"]) == {tag_of(t) for t in event_types()} | {
        "api.request", "api.reply"}
    senders: dict[str, str] = {}
    for op in doc["operations"].values():
        channel = _resolve(doc, op["channel"]["$ref"])
        for message_ref in op.get("messages", []):
            assert message_ref["$ref"].startswith(op["channel"]["$ref"] + "/messages/")
            message = _resolve(doc, _resolve(doc, message_ref["$ref"])["$ref"])
            assert message["name"] in channel["messages"]
            if op["action"] == "send":
                senders[message["name"]] = op["x-cairn-service"]
    # Each event type has exactly one writing service, and it says so; requests are sent by
    # clients and answered with replies.
    assert set(senders) == {tag_of(t) for t in event_types()} | {"api.request"}
    assert senders["api.request"] == "CLI / client"
    assert senders["worker.exited"] == "launcher"
    assert senders["worker.result"] == "worker SDK"
    assert senders["deadletter.event"] == "bus (dead letters)"


def test_every_event_type_has_a_known_writer() -> None:
    for cls in event_types():
        assert writer_of(tag_of(cls)) in SERVICES


def _edit_top(tag: str, edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        schema = load(folder, tag)
        edit(schema["$defs"][schema["$ref"].rsplit("/", 1)[-1]])
        save(folder, tag, schema)

    return apply


def _drop(name: str) -> Callable[[dict[str, Any]], None]:
    def edit(defn: dict[str, Any]) -> None:
        del defn["properties"][name]
        defn["required"] = [r for r in defn["required"] if r != name]

    return edit


# The cases lean on what DESIGN.md promises every event (`id`, `at`, `source`, `actor`) and on
# whichever event nests a Struct, so other people's changes to one event do not break them.
TAG = "job.submitted"


def _nested(schema: dict[str, Any]) -> str:
    """A Struct nested in an event schema (not the event itself)."""
    own = schema["$ref"].rsplit("/", 1)[-1]
    return str(
        next(n for n, d in sorted(schema["$defs"].items()) if n != own and "properties" in d)
    )


def _add_nested_field(folder: Path) -> None:
    schema = load(folder, TAG)
    schema["$defs"][_nested(schema)]["properties"]["tpus"] = {"type": "integer", "default": 0}
    save(folder, TAG, schema)


def _add_tag(folder: Path) -> None:
    schema = load(folder, TAG)
    top(schema)["properties"]["type"] = {"enum": ["job.paused"]}  # a tag the code lacks
    save(folder, "job.paused", schema)


def _add_field(defn: dict[str, Any]) -> None:
    defn["properties"]["priority"] = {"type": "integer", "default": 0}


def _retype_id(defn: dict[str, Any]) -> None:
    defn["properties"]["id"] = {"type": "integer"}


def _not_required(name: str) -> Callable[[dict[str, Any]], None]:
    def edit(defn: dict[str, Any]) -> None:
        defn["required"] = [r for r in defn["required"] if r != name]

    return edit


def _requests(edit: Callable[[dict[str, Any], dict[str, Any]], None]) -> Callable[[Path], None]:
    """Edit the request union of the baseline's API envelope: `edit(union, defs)`."""

    def apply(folder: Path) -> None:
        path = folder / "api" / "envelope.json"
        schema = json.loads(path.read_text())
        defs = schema["$defs"]
        edit(defs[schema["$ref"].rsplit("/", 1)[-1]]["properties"]["request"], defs)
        path.write_text(json.dumps(schema, indent=2) + "\n")

    return apply


def _add_verb(union: dict[str, Any], defs: dict[str, Any]) -> None:
    union["discriminator"]["mapping"]["pause"] = "#/$defs/StudyShow"  # a verb the code lacks


def _drop_verb(union: dict[str, Any], defs: dict[str, Any]) -> None:
    ref = union["discriminator"]["mapping"].pop("hold")
    union["anyOf"] = [v for v in union["anyOf"] if v["$ref"] != ref]


def _add_verb_field(union: dict[str, Any], defs: dict[str, Any]) -> None:
    _add_field(defs["StudyAddSite"])


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    # A request verb the baseline has and the code lacks: its old senders are refused.
    "request verb removed": (_requests(_add_verb), "field 'request' changed type"),
    "request field removed": (_requests(_add_verb_field),
                              "field 'request.priority' removed"),
    # The baseline has a field the code lacks: the code removed it.
    "field removed": (_edit_top(TAG, _add_field), f"{TAG}: field 'priority' removed"),
    "nested field removed": (_add_nested_field, ".tpus' removed"),
    "field type changed": (_edit_top(TAG, _retype_id), "'id' changed type from integer to string"),
    "event type removed": (_add_tag, "job.paused: event type removed"),
    # The code requires a field the baseline does not know: old writers never send it.
    "new required field": (_edit_top(TAG, _drop("source")), "new field 'source' is required"),
    "field became required": (_edit_top(TAG, _not_required("id")), "'id' became required"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_incompatible_change_is_named(baseline: Path, case: str) -> None:
    doctor, expected = CASES[case]
    doctor(baseline)
    result = run_check(baseline)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("INCOMPATIBLE ") for line in lines), result.stdout
    assert any(expected in line for line in lines), result.stdout
    assert "stale" not in result.stdout


STALE: dict[str, Callable[[Path], None]] = {
    # The code has an event type the baseline lacks: a new type is an addition.
    "new event type": lambda folder: (folder / "events" / f"{TAG}.json").unlink(),
    # A new request verb: no old client sends it, an old coordinator refuses it by name.
    "new request verb": _requests(_drop_verb),
    # The code has a field with a default the baseline lacks.
    "new optional field": _edit_top(TAG, _drop("actor")),
    "docs changed": _edit_top(TAG, lambda d: d.update(description="old words")),
    "asyncapi missing": lambda folder: (folder / "asyncapi.yaml").unlink(),
}


@pytest.mark.parametrize("case", sorted(STALE))
def test_compatible_difference_is_stale(baseline: Path, case: str) -> None:
    STALE[case](baseline)
    result = run_check(baseline)
    assert result.returncode == 1
    assert "INCOMPATIBLE" not in result.stdout
    assert result.stdout.splitlines()[-1] == f"{baseline}/ is stale: run `make schemas`"


def test_identical_copy_passes(baseline: Path) -> None:
    result = run_check(baseline)
    assert result.returncode == 0, result.stdout


def committed(tmp_path: Path, folder: Path) -> Path:
    """A git repository whose one commit holds `folder` as its schemas/."""
    repo = tmp_path / "repo"
    shutil.copytree(folder, repo / "schemas")

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                        *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "baseline")
    return repo


def run_against(repo: Path, rev: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), "--against", rev, "--repo", str(repo)],
                          capture_output=True, text=True, timeout=60, cwd=REPO, check=False)


def test_against_a_revision_names_what_breaks_it(baseline: Path, tmp_path: Path) -> None:
    # schemas/ re-exported after the change would be "up to date"; the release is not.
    doctor, expected = CASES["field removed"]
    doctor(baseline)
    result = run_against(committed(tmp_path, baseline), "HEAD")
    assert result.returncode == 1, result.stdout
    assert any(expected in line for line in result.stdout.splitlines()), result.stdout


def test_against_a_revision_accepts_additions(baseline: Path, tmp_path: Path) -> None:
    STALE["new event type"](baseline)  # the code added a type since that revision
    result = run_against(committed(tmp_path, baseline), "HEAD")
    assert result.returncode == 0, result.stdout
    assert result.stdout.startswith("compatible with schemas/ at HEAD")


def test_against_an_unknown_revision_is_exit_2(baseline: Path, tmp_path: Path) -> None:
    result = run_against(committed(tmp_path, baseline), "no-such-tag")
    assert result.returncode == 2
    assert "no-such-tag" in result.stdout and "Traceback" not in result.stderr


RELEASE_BASELINE = SCHEMAS / "baseline"


def test_the_code_is_compatible_with_the_last_release() -> None:
    result = run_against(REPO, str(RELEASE_BASELINE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"compatible with {RELEASE_BASELINE}/")


def test_the_release_baseline_holds_every_kind_of_contract() -> None:
    files = {p.relative_to(RELEASE_BASELINE).as_posix() for p in RELEASE_BASELINE.rglob("*.json")}
    assert "events/job.submitted.json" in files and "index.json" in files
    assert any(f.startswith("api/") for f in files) and "data/envelope.json" in files


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_breaking_change_fails_against_the_release_even_with_schemas_reexported(
        tmp_path: Path, case: str) -> None:
    # The release had what the doctored copy has; the code (and the re-exported schemas/,
    # which are current) does not: the freshness check passes, the release check does not.
    release = tmp_path / "release"
    shutil.copytree(RELEASE_BASELINE, release)
    doctor, expected = CASES[case]
    doctor(release)
    assert run_check(SCHEMAS).returncode == 0, "schemas/ is current: re-exported"
    result = run_against(REPO, str(release))
    assert result.returncode == 1, result.stdout
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("INCOMPATIBLE ") for line in lines), result.stdout
    assert any(expected in line for line in lines), result.stdout


def test_a_release_baseline_that_cannot_be_read_is_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_against(REPO, str(empty))
    assert result.returncode == 2 and "holds no events" in result.stdout, result.stdout
    broken = tmp_path / "broken"
    shutil.copytree(RELEASE_BASELINE, broken)
    (broken / "events" / f"{TAG}.json").write_text('{"$ref": "#/$defs/Nope"')
    result = run_against(REPO, str(broken))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
