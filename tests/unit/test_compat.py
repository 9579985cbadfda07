"""Each compatibility baseline (compat/) catches a break of its surface, on a patched copy.

Every test changes a copy of the code (a patched click command, a client module written to a
temporary folder, a renderer wrapped for the test) or of a baseline, never the tree itself,
and asserts the line a developer would see in CI, or the exit code CI acts on.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import msgspec
import pytest

import cairn.client
from cairn import errors
from cairn.bundles import render_helm
from cairn.bus import _connection as bus_connection
from cairn.cli.main import LazyGroup, cli
from cairn.cli.output import OutputOption
from cairn.evidence import bundle as evidence_bundle
from cairn.state.job import JobState
from tools import _compat_cli, _compat_client, _compat_files, compat
from tools._compat_rules import additions, breaks

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def baselines() -> dict[str, Any]:
    return compat.read_baselines(str(compat.BASELINES))


@pytest.fixture(scope="module")
def current() -> dict[str, Any]:
    return compat.generate()


def cli_surface(group: click.Group) -> dict[str, Any]:
    return {**_compat_cli.describe(group), compat.SCHEMAS: _compat_cli.json_outputs(group)}


def patched_cli(change: Any) -> click.Group:
    """The real `cairn` command tree, with `change(group_name, group)` applied to a copy of
    each top-level command as it is loaded."""

    class Patched(LazyGroup):
        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            command = super().get_command(ctx, cmd_name)
            if command is None:
                return None
            command = copy.copy(command)
            if isinstance(command, click.Group):
                command.commands = {n: copy.copy(c) for n, c in command.commands.items()}
            change(cmd_name, command)
            return command

    return Patched(name="cairn", params=cli.params, help=cli.help)


def run_tool(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`tools/compat.py ARGS` as CI runs it (`make check-compat`): exit code and output."""
    code = compat.main(list(args))
    return code, capsys.readouterr().out


def test_the_committed_baselines_hold(current: dict[str, Any]) -> None:
    code, lines = compat.check(str(compat.BASELINES), current)
    assert code == 0, "\n".join(lines)
    assert {line.split(":")[0] for line in lines} == set(compat.SURFACES)


# -- the CLI -------------------------------------------------------------------------------------

def test_a_removed_cli_flag_fails(baselines: dict[str, Any]) -> None:
    def drop_state(name: str, group: click.Command) -> None:
        if name == "job":
            assert isinstance(group, click.Group)
            group.commands["list"].params = [p for p in group.commands["list"].params
                                             if p.name != "state"]

    problems = compat.surface_breaks("cli", baselines["cli"], cli_surface(patched_cli(drop_state)))
    assert problems == ["INCOMPATIBLE cli: commands / cairn job list / params / --state removed"]


def test_a_changed_default_a_lost_choice_and_a_new_required_option_fail(
        baselines: dict[str, Any]) -> None:
    def change(name: str, group: click.Command) -> None:
        if name != "job":
            return
        assert isinstance(group, click.Group)
        cancel = group.commands["cancel"]
        cancel.params = [copy.copy(p) for p in cancel.params]
        reason = next(p for p in cancel.params if p.name == "reason")
        reason.default = "stopped"
        listing = group.commands["list"]
        listing.params = [copy.copy(p) for p in listing.params]
        state = next(p for p in listing.params if p.name == "state")
        state.type = click.Choice(["queued", "running"])
        listing.params.append(click.Option(["--limit"], type=int, required=True))

    problems = compat.surface_breaks("cli", baselines["cli"], cli_surface(patched_cli(change)))
    assert 'INCOMPATIBLE cli: commands / cairn job cancel / params / --reason / default ' \
        'changed from "cancelled" to "stopped"' in problems
    assert "INCOMPATIBLE cli: commands / cairn job list / params / --state / type / choices / " \
        "completed removed" in problems
    assert any("cairn job list / params / --limit is new and required" in p for p in problems)


def test_a_new_optional_flag_and_a_new_command_are_additions(baselines: dict[str, Any]) -> None:
    def add(name: str, group: click.Command) -> None:
        if name == "job":
            assert isinstance(group, click.Group)
            listing = group.commands["list"]
            listing.params = [*listing.params, click.Option(["--limit"], type=int, default=None)]
            group.commands["archive"] = click.Command("archive", help="Archive a job.")

    current = cli_surface(patched_cli(add))
    assert compat.surface_breaks("cli", baselines["cli"], current) == []
    # Counted against the CLI without the change (the release baseline may lack commands
    # added since, which are additions too).
    unchanged = cli_surface(patched_cli(lambda name, group: None))
    assert additions(unchanged, current) == 2


def test_a_changed_exit_code_fails(baselines: dict[str, Any],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(errors.NotFound, "exit_code", 10)
    monkeypatch.setattr(errors, "EXIT_CODES", tuple(
        (10 if code == 4 else code, meaning, error) for code, meaning, error in errors.EXIT_CODES))
    problems = compat.surface_breaks("cli", baselines["cli"], cli_surface(cli))
    assert "INCOMPATIBLE cli: errors / NotFound / exit_code changed from 4 to 10" in problems
    assert "INCOMPATIBLE cli: exit_codes / 4 removed" in problems


def test_a_changed_json_output_fails(baselines: dict[str, Any]) -> None:
    class JobWithoutState(msgspec.Struct, kw_only=True):
        job: str
        name: str

    def retype(name: str, group: click.Command) -> None:
        if name != "job":
            return
        assert isinstance(group, click.Group)
        show = group.commands["show"]
        show.params = [copy.copy(p) for p in show.params]
        option = next(p for p in show.params if isinstance(p, OutputOption))
        option.schema = JobWithoutState
        listing = group.commands["list"]
        listing.params = [copy.copy(p) for p in listing.params]
        option = next(p for p in listing.params if isinstance(p, OutputOption))
        option.schema = JobState  # one job, not a list of them

    problems = compat.surface_breaks("cli", baselines["cli"], cli_surface(patched_cli(retype)))
    assert "INCOMPATIBLE cli cairn job show: field 'state' removed" in problems
    assert any(p.startswith("INCOMPATIBLE cli cairn job list: changed type from") for p in problems)


def test_the_cli_check_fails_ci_and_regenerating_cannot_hide_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The baseline of a release whose `job list` had one more flag than the code has now.
    baseline = tmp_path / "compat"
    shutil.copytree(compat.BASELINES, baseline)
    doc = json.loads((baseline / "cli.json").read_text())
    params = doc["commands"]["cairn job list"]["params"]
    params["--limit"] = {**params["--state"], "names": {"--limit": True}}
    (baseline / "cli.json").write_text(json.dumps(doc))
    code, out = run_tool(capsys, "--against", str(baseline))
    assert code == 1, out
    assert "INCOMPATIBLE cli: commands / cairn job list / params / --limit removed" in out
    assert "breaking changes need a new major version" in out
    code, out = run_tool(capsys, "--write", "--against", str(baseline))
    assert code == 1 and "not writing the baselines" in out
    assert json.loads((baseline / "cli.json").read_text()) == doc
    # What review agreed is no break is recorded on purpose, visibly.
    code, out = run_tool(capsys, "--write", "--force", "--against", str(baseline))
    assert code == 0 and run_tool(capsys, "--against", str(baseline))[0] == 0


def test_against_a_release_tag_reads_compat_as_committed_there(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(compat.BASELINES, repo / "compat")
    doc = json.loads((repo / "compat" / "client.json").read_text())
    doc["names"]["wait_all"] = {"kind": "function", "async": True, "params": {}}
    (repo / "compat" / "client.json").write_text(json.dumps(doc))

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                        *args], check=True, capture_output=True, timeout=60)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "release")
    git("tag", "v0.1.0")
    code, lines = compat.check("v0.1.0", repo=repo)
    assert code == 1 and "INCOMPATIBLE client: names / wait_all removed" in lines
    code, lines = compat.check("v9.9.9", repo=repo)
    assert code == 2 and lines[0].startswith("cannot read the baseline:")


def test_a_new_surface_gets_its_first_baseline(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    baseline = tmp_path / "compat"
    shutil.copytree(compat.BASELINES, baseline)
    (baseline / "evidence.json").unlink()  # as if `evidence` were a surface new since then
    code, out = run_tool(capsys, "--against", str(baseline))
    assert code == 2 and "no evidence.json" in out
    code, out = run_tool(capsys, "--write", "--against", str(baseline))
    assert code == 0, out
    assert json.loads((baseline / "evidence.json").read_text())["version"] == "0.1.0"


def test_an_unreadable_baseline_is_exit_2(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    baseline = tmp_path / "compat"
    shutil.copytree(compat.BASELINES, baseline)
    (baseline / "client.json").write_text("{not json")
    code, out = run_tool(capsys, "--against", str(baseline))
    assert code == 2
    assert out.strip().startswith(f"cannot read the baseline: {baseline}/client.json: not JSON")


def test_an_experimental_command_is_not_held(baselines: dict[str, Any]) -> None:
    def mark(name: str, group: click.Command) -> None:
        if name == "job":
            assert isinstance(group, click.Group)
            group.commands["list"].help = "Experimental: list jobs."

    marked = cli_surface(patched_cli(mark))
    assert marked["commands"]["cairn job list"]["experimental"] is True
    base = copy.deepcopy(marked)
    base["commands"]["cairn job list"]["params"]["--gone"] = {"kind": "option"}
    assert compat.surface_breaks("cli", base, marked) == []
    del base["commands"]["cairn job list"]["experimental"]
    assert compat.surface_breaks("cli", base, marked) == [
        "INCOMPATIBLE cli: commands / cairn job list / params / --gone removed"]


# -- the Python client ---------------------------------------------------------------------------

def client_module(tmp_path: Path, text: str) -> Any:
    """A module written to `tmp_path` and imported: a patched `cairn.client`."""
    path = tmp_path / "patched_client.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("patched_client", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_removed_client_function_fails(tmp_path: Path, baselines: dict[str, Any]) -> None:
    source = Path(cairn.client.__file__).read_text()
    patched = client_module(tmp_path, source + '__all__.remove("get_message")\n')
    problems = compat.surface_breaks("client", baselines["client"],
                                     {**_compat_client.describe(patched),
                                      "module": "cairn.client"})
    assert problems == ["INCOMPATIBLE client: names / get_message removed"]


def test_a_changed_client_signature_fails(tmp_path: Path, baselines: dict[str, Any]) -> None:
    patched = client_module(tmp_path, """
from __future__ import annotations
from cairn.client import *  # noqa: F403
from cairn.client import Client as _Client, __all__  # noqa: F401
from cairn.state.job import JobState

class Client(_Client):
    async def jobs(self, state: str | None, limit: int) -> list[JobState]:
        return []

    async def cancel(self, job_id: str, *, reason: str = "cancelled") -> JobState:
        raise NotImplementedError
""")
    problems = compat.surface_breaks("client", baselines["client"],
                                     {**_compat_client.describe(patched),
                                      "module": "cairn.client"})
    members = "INCOMPATIBLE client: names / Client / members"
    assert f"{members} / jobs / params / state / required changed from false to true" in problems
    assert any(p.startswith(f"{members} / jobs / params / limit is new and required")
               for p in problems)
    assert f'{members} / cancel / params / reason / kind changed from "positional or keyword" ' \
        'to "keyword-only"' in problems


LOW_LEVEL = {"Bus", "Call", "api.Request", "api.Result"}
"""Internals the client's low-level calls name (docs/compatibility.md): `Client.call*` take
`cairn.api` requests, `get_message` and `delete_message` a connected `cairn.bus.Bus`, and
`EvidenceClient` is made by `Client.evidence` from the client's own `call`."""
STANDARD = {"Any", "AsyncIterator", "BaseException", "Ed25519PublicKey", "Iterable", "Literal",
            "object", "None", "Path", "Sequence",
            "TracebackType", "bool", "bytes", "datetime", "datetime.datetime", "dict", "float",
            "int", "list", "str", "tuple", "type", "typing.Any"}
"""Types of the standard library and of Cairn's dependencies (cryptography's key)."""


def test_every_type_the_client_names_is_exported_by_it(current: dict[str, Any]) -> None:
    named: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("annotation", "returns") and isinstance(item, str):
                    # Type names, not the values of a Literal.
                    bare = re.sub(r"'[^']*'|\"[^\"]*\"", "", item)
                    named.update(re.findall(r"[A-Za-z_][\w.]*", bare))
                else:
                    walk(item)

    walk(current["client"])
    exported = set(cairn.client.__all__)
    internal = {n for n in named - STANDARD - LOW_LEVEL if n.rsplit(".", 1)[-1] not in exported}
    assert internal == set(), f"cairn.client's signatures name types it does not export: " \
        f"{sorted(internal)} (add them to cairn.client.__all__)"


# -- layouts -------------------------------------------------------------------------------------

def test_a_renamed_bundle_file_fails(baselines: dict[str, Any],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real = render_helm.render

    def renamed(manifest: Any) -> dict[str, str]:
        files = real(manifest)
        files["install.sh"] = files.pop("deploy.sh")
        return files

    monkeypatch.setattr(render_helm, "render", renamed)
    problems = compat.surface_breaks("bundles", baselines["bundles"],
                                     _compat_files.bundle_layouts())
    assert problems == ["INCOMPATIBLE bundles: deployers / helm / files / deploy.sh removed"]


def test_a_renamed_evidence_file_fails(baselines: dict[str, Any],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence_bundle, "SNAPSHOT", "site-snapshot.json")
    problems = compat.surface_breaks("evidence", baselines["evidence"],
                                     _compat_files.evidence_layout())
    assert problems == ["INCOMPATIBLE evidence: files / snapshot.json removed"]


def test_a_changed_data_plane_header_fails(baselines: dict[str, Any],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bus_connection, "MSGPACK", "application/x-msgpack")
    problems = compat.surface_breaks("dataplane", baselines["dataplane"],
                                     _compat_files.dataplane_layout())
    assert 'INCOMPATIBLE dataplane: headers / Content-Type changed from "application/msgpack" ' \
        'to "application/x-msgpack"' in problems


# -- the rules and the version -------------------------------------------------------------------

def test_a_break_passes_only_with_a_higher_major_version(current: dict[str, Any]) -> None:
    broken = copy.deepcopy(current)
    del broken["client"]["names"]["get_message"]
    code, lines = compat.check(str(compat.BASELINES), broken, version="0.9.0")
    assert code == 1 and "INCOMPATIBLE client: names / get_message removed" in lines
    code, lines = compat.check(str(compat.BASELINES), broken, version="1.0.0")
    assert code == 0
    assert "client: 1 breaking change(s) permitted: version 1.0.0 is a new major release " \
        "after 0.1.0" in lines


def test_relaxations_pass_and_their_reverse_breaks() -> None:
    optional = {"p": {"required": False, "kind": "positional or keyword"}}
    required = {"p": {"required": True, "kind": "keyword-only"}}
    assert breaks("s", required, optional) == []
    assert breaks("s", optional, required) == [
        "INCOMPATIBLE s: p / required changed from false to true",
        'INCOMPATIBLE s: p / kind changed from "positional or keyword" to "keyword-only"']


def test_the_schemas_check_permits_a_break_only_with_a_new_major_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import check_schemas

    baseline = tmp_path / "baseline"
    shutil.copytree(REPO / "schemas" / "baseline", baseline)
    path = baseline / "events" / "job.queued.json"
    schema = json.loads(path.read_text())
    top = schema["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    top["properties"]["x_compat_gone"] = {"type": "integer"}  # a field the code lacks
    path.write_text(json.dumps(schema))
    code, lines = check_schemas.check_against(REPO, str(baseline))
    assert code == 1 and "INCOMPATIBLE job.queued: field 'x_compat_gone' removed" in lines
    monkeypatch.setattr(check_schemas, "project_version", lambda: "1.0.0")
    code, lines = check_schemas.check_against(REPO, str(baseline))
    assert code == 0 and "breaking change(s) permitted" in lines[0]


def test_json_that_is_not_the_declared_output_fails_the_test_that_ran_it() -> None:
    from tests.output_contract import check_json_output, declared_output

    assert declared_output(["job", "show", "j-1", "--study", "s"]) is JobState
    assert declared_output(["job", "new", "x"]) is None  # untyped: experimental
    with pytest.raises(AssertionError, match="not its declared output type"):
        check_json_output(["job", "show", "j-1", "-o", "json"], 0, '[{"job": "j-1"}]')
    check_json_output(["job", "show", "j-1"], 0, "a table")  # only -o json is held
