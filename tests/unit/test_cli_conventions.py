"""The CLI's conventions, held without a federation: exit codes that each mean one thing, `-o`
always the output format, tables that keep every id, id prefixes, typed `--set`, known `-O`
keys, `cairn job new` and `cairn clean`."""

from __future__ import annotations

import ast
import os
import py_compile
import re
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from cairn.cli.tables import Column, print_table
from cairn.client.prefix import resolve_prefix
from cairn.errors import EXIT_CODES, InvalidInput, InvalidName, NotFound
from cairn.evidence import bundle as bundles
from cairn.evidence.keys import SigningKey
from cairn.evidence.trust import trust_entry
from cairn.runtime import context
from cairn.runtime.service import SERVICE_OPTIONS, SERVICES, parse_args
from cairn.spec.job import load_job_spec
from cairn.spec.params import apply_sets
from tests.cli_runner import cairn
from tests.fixtures import evidence as ev

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def nowhere(tmp_path: Path) -> dict[str, str | None]:
    return {"CAIRN_CONTEXT": str(tmp_path / "absent.yaml"), "CAIRN_NATS_URL": None,
            "CAIRN_STUDY": None, "CAIRN_ACTOR": None}


# -- exit codes ---------------------------------------------------------------------------


def test_a_forged_bundle_and_a_typo_exit_with_different_codes(tmp_path: Path) -> None:
    key = SigningKey.generate()
    trust = tmp_path / "trust.yaml"
    import yaml

    trust.write_text(yaml.safe_dump({"signers": [trust_entry("lab", "site", key.verifying_key)]}))
    files = ev.bundle("site-a", [key])
    forged = {**files, bundles.SNAPSHOT: bundles.encode_snapshot(ev.snapshot("site-a",
                                                                             cores=2))}
    forged[bundles.MANIFEST] = bundles.manifest_of(forged)
    bundles.write_dir(forged, tmp_path / "forged")
    bundles.write_dir(files, tmp_path / "good")
    good, _, _ = cairn("evidence", "verify", str(tmp_path / "good"), "--trust", str(trust))
    forged_code, out, _ = cairn("evidence", "verify", str(tmp_path / "forged"), "--trust",
                                str(trust))
    typo, _, err = cairn("evidence", "verify", str(tmp_path / "good"), "--trsut", str(trust))
    misspelt, _, _ = cairn("evidence", "verfy", str(tmp_path / "good"))
    assert (good, forged_code, typo, misspelt) == (0, 9, 2, 2)
    assert "INVALID" in out and "No such option" in err


def test_the_exit_codes_are_one_table_everywhere_they_are_told() -> None:
    codes = [code for code, _, _ in EXIT_CODES]
    assert codes == sorted(set(codes))
    code, out, _ = cairn("--help")
    assert code == 0
    for number, meaning, _ in EXIT_CODES:
        assert re.search(rf"^\s+{number}\s+{re.escape(meaning.split(':')[0])}", out, re.M), number
    readme = " ".join((REPO / "README.md").read_text().split())
    for number, meaning, _ in EXIT_CODES[1:-1]:
        assert f"`{number}` {meaning.split(':')[0]}" in readme, number
    reference = (REPO / "docs" / "cli.md").read_text()
    assert all(f"| {number} | {meaning}" in reference for number, meaning, _ in EXIT_CODES)


# -- -o is the output format --------------------------------------------------------------


@pytest.mark.parametrize("value", ["json", "out/"])
def test_bundle_minus_o_is_a_format_never_a_folder(tmp_path: Path, value: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = cairn("bundle", "--recipe", "cpu-docker", "-o", value)
    assert code == 2 and "--out" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere


def test_bundle_writes_to_out_and_prints_in_the_format_asked(tmp_path: Path) -> None:
    code, out, err = cairn("bundle", "--recipe", "h100-eks-ubuntu-training-k", "--out",
                           str(tmp_path / "b"), "-o", "json")
    assert code == 0, err
    import json

    printed = json.loads(out)
    assert printed["recipe"] == "h100-eks-ubuntu-training-kubeflow"
    assert "checksums.txt" in printed["files"]
    assert (tmp_path / "b" / "checksums.txt").is_file()


def test_provision_writes_to_out_and_refuses_minus_o_as_a_folder(tmp_path: Path) -> None:
    fed = tmp_path / "federation.yaml"
    fed.write_text("federation: t\nhub: hub\nsites: [{name: hub, org: o}]\n"
                   "admins: [{name: a@o, org: o, role: project_admin}]\n"
                   "studies: {s: {sites: [hub], admins: [a@o]}}\n")
    code, _, err = cairn("provision", str(fed), "-o", str(tmp_path / "trust"))
    assert code == 2 and "not an output format" in err and not (tmp_path / "trust").exists()
    code, out, err = cairn("provision", str(fed), "--out", str(tmp_path / "trust"), "-o", "yaml")
    assert code == 0, err
    assert "server_config:" in out and (tmp_path / "trust" / "server" / "nats.conf").is_file()


def test_events_tail_takes_yaml(nowhere: dict[str, str | None]) -> None:
    code, _, err = cairn("events", "tail", "-o", "yaml", "--study", "s", env=nowhere)
    assert code == 7 and "no federation found" in err  # accepted; only the bus is missing


# -- tables -------------------------------------------------------------------------------


def test_a_table_at_80_columns_keeps_every_id_and_says_what_it_left_out(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    ids = [f"j-01m8smfp6{n}zq3v9k0x2c4b7d8e9f" for n in range(3)]
    columns = [Column("job", keep=True), Column("name", keep=True), Column("state"),
               Column("submitted"), Column("actor"), Column("detail", wrap=True)]
    rows = [(i, f"h100-eks-ubuntu-training-kubeflow-{n}", "running", "2026-12-31 20:24:59",
             "admin@coord", "a long message " * 8) for n, i in enumerate(ids)]
    print_table(None, columns, rows)
    out = capsys.readouterr().out
    assert all(i in out for i in ids) and "h100-eks-ubuntu-training-kubeflow-2" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "left out to fit 80 columns" in out and "--wide" in out
    assert "…" not in out
    from cairn.cli.tables import WIDE_META

    with click.Context(click.Command("x")) as ctx:
        ctx.meta[WIDE_META] = True
        print_table(None, columns, rows)
    wide = capsys.readouterr().out
    assert "2026-12-31 20:24:59" in wide and "admin@coord" in wide and "left out" not in wide


def test_ids_wider_than_the_terminal_are_printed_whole(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "30")
    long_id = "j-" + "x" * 40
    print_table(None, [Column("job", keep=True), Column("state")], [(long_id, "queued")])
    assert long_id in capsys.readouterr().out


# -- id prefixes --------------------------------------------------------------------------


def test_a_prefix_resolves_an_exact_name_wins_and_ambiguity_lists_the_candidates() -> None:
    ids = ["j-01aaa1", "j-01aab2", "j-01b"]
    assert resolve_prefix("j-01b", ids, kind="job") == "j-01b"
    assert resolve_prefix("j-01aaa", ids, kind="job") == "j-01aaa1"
    assert resolve_prefix("01aab", ids, kind="job") == "j-01aab2"  # without j-
    with pytest.raises(InvalidInput, match=r"ambiguous: 2 jobs .*j-01aaa1, j-01aab2"):
        resolve_prefix("j-01aa", ids, kind="job")
    with pytest.raises(NotFound, match="no job named 'j-02'"):
        resolve_prefix("j-02", ids, kind="job")
    with pytest.raises(InvalidName):
        resolve_prefix("j.>", ids, kind="job")
    assert resolve_prefix("cpu", ["cpu", "cpu-docker"], kind="recipe") == "cpu"


# -- --set --------------------------------------------------------------------------------


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    path = tmp_path / "job.yaml"
    path.write_text("name: p\ncode: app\nroles: {client: {entrypoint: python m.py}}\n"
                    "params: {rounds: 3, lr: 0.5, name: a, flag: false, sizes: [1], "
                    "opt: {beta: 0.9}, extra: null}\n")
    return path


@pytest.mark.parametrize(("item", "key", "value"), [
    ("params.rounds=5", "rounds", 5),
    ("params.lr=1", "lr", 1.0),
    ("params.lr=0.01", "lr", 0.01),
    ("params.name=123", "name", "123"),
    ("params.flag=true", "flag", True),
    ("params.sizes=[2, 3]", "sizes", [2, 3]),
    ("params.opt.beta=0.5", "opt", {"beta": 0.5}),
    ("params.extra={a: 1}", "extra", {"a": 1}),
])
def test_set_is_typed_as_the_spec_declares(spec: Path, item: str, key: str,
                                           value: object) -> None:
    got = apply_sets(load_job_spec(spec), [item]).params[key]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(("item", "message"), [
    ("params.rounds=five", "'five' is not an integer (job.yaml declares rounds: 3)"),
    ("params.rounds=2.5", "is not an integer"),
    ("params.rounds=true", "is not an integer"),
    ("params.lr=fast", "is not a number"),
    ("params.flag=1", "is not a boolean"),
    ("params.sizes=3", "is not a list"),
    ("params.roundz=5", "declares no param 'roundz' (its params here: extra, flag, lr, name, "
                        "opt, rounds, sizes)"),
    ("params.rounds.x=1", "declares no mapping params.rounds"),
    ("timeout=5m", "write params.KEY=VALUE"),
    ("params.rounds", "write params.KEY=VALUE"),
    ("params.extra=2024-01-01", "not a JSON value"),
    ("params.extra=&a [*a]", "alias"),
])
def test_set_refuses_what_the_spec_does_not_declare(spec: Path, item: str,
                                                    message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        apply_sets(load_job_spec(spec), [item], file="job.yaml")
    assert message in str(caught.value)


def test_a_bad_set_fails_before_connecting(spec: Path, nowhere: dict[str, str | None]) -> None:
    code, _, err = cairn("job", "submit", str(spec), "--set", "params.rounds=x", env=nowhere)
    assert code == 3 and "--set params.rounds" in err and "no federation" not in err


# -- cairn run -O -------------------------------------------------------------------------


def test_run_refuses_an_unknown_option_naming_the_known_ones() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_args(["coordinator", "-O", "evidence_trsut=t.yaml"])
    assert "'evidence_trsut'" in str(caught.value) and "evidence_trust" in str(caught.value)
    with pytest.raises(InvalidInput, match="KEY=VALUE"):
        parse_args(["signer", "-O", "evidence_key"])
    # A key read by any of the services run together is fine.
    _, config = parse_args(["agent", "snapshotter", "-O", "snapshot_interval_s=5"])
    assert config.options == {"snapshot_interval_s": "5"}
    done = subprocess.run([sys.executable, "-m", "cairn", "run", "validator", "-O", "colour=1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3 and "unknown option 'colour'" in done.stderr
    assert "catalog" in done.stderr and "Traceback" not in done.stderr


def _option_keys(package: Path) -> set[str]:
    """Keys the service's own modules read from its options: `options.get("k")`,
    `opts["k"]` (a backend's keyword dicts, in subpackages, are not service options)."""
    keys = set()
    for path in (package.glob("*.py") if package.is_dir() else [package]):
        for node in ast.walk(ast.parse(path.read_text())):
            target, key = None, None
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get" and node.args):
                target, key = node.func.value, node.args[0]
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                target, key = node.value, node.slice
            text = ast.unparse(target) if target is not None else ""
            if re.search(r"\b(options|opts)\b", text) and isinstance(key, ast.Constant):
                keys.add(str(key.value))
    return keys


@pytest.mark.parametrize("service", list(SERVICES))
def test_the_option_table_is_what_each_service_reads(service: str) -> None:
    module = SERVICES[service].partition(":")[0]
    # services/<name>/ is installed as cairn.<name>; a service in the library is its module
    where = (REPO / "services" / service if (REPO / "services" / service).is_dir()
             else REPO / "libs" / Path(*module.split("."))).with_suffix("")
    where = where if where.is_dir() else where.with_suffix(".py")
    assert _option_keys(where) == set(SERVICE_OPTIONS[service])


# -- cairn job new ------------------------------------------------------------------------


@pytest.mark.parametrize("template", ["script", "fedavg", "pytorch"])
def test_each_template_is_a_valid_job(tmp_path: Path, template: str) -> None:
    code, out, err = cairn("job", "new", "my-job", "--template", template, "--dir",
                           str(tmp_path))
    assert code == 0, err
    spec = load_job_spec(tmp_path / "my-job" / "job.yaml")
    assert spec.name == "my-job" and spec.params
    for source in (tmp_path / "my-job" / "app").rglob("*.py"):
        py_compile.compile(str(source), doraise=True)
    assert "job submit" in out


def test_job_new_refuses_a_bad_name_and_a_folder_in_use(tmp_path: Path) -> None:
    assert cairn("job", "new", "My.Job", "--dir", str(tmp_path))[0] == 3
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    code, _, err = cairn("job", "new", "busy", "--dir", str(tmp_path))
    assert code == 6 and "not empty" in err
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["keep.txt"]


# -- cairn clean --------------------------------------------------------------------------


def _federation_dir(tmp_path: Path, up_pid: int | None) -> tuple[Path, dict[str, str | None]]:
    root = tmp_path / ".cairn"
    (root / "nats" / "jetstream").mkdir(parents=True)
    (root / "federation.yaml").write_text("federation: local\n")
    ctx = tmp_path / "ctx" / "context.yaml"
    context.save(context.Context(nats_url="tls://127.0.0.1:1", dir=str(root.resolve()),
                                 up_pid=up_pid), ctx)
    return root, {"CAIRN_CONTEXT": str(ctx), "CAIRN_NATS_URL": None}


def test_clean_refuses_while_the_federation_runs(tmp_path: Path) -> None:
    root, env = _federation_dir(tmp_path, up_pid=os.getppid())
    code, _, err = cairn("clean", "--dir", str(root), env=env)
    assert code == 6 and f"pid {os.getppid()}" in err and "cairn down" in err
    assert root.is_dir()


def test_clean_refuses_while_a_process_of_it_is_left(tmp_path: Path) -> None:
    root, env = _federation_dir(tmp_path, up_pid=None)
    # A nats-server left running on the store names the folder on its command line.
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                               "-sd", str(root / "nats")])
    try:
        # Once it has exec'd (its command line names the store), as a left-over server has.
        cmdline = Path(f"/proc/{orphan.pid}/cmdline")
        deadline = time.monotonic() + 60
        while str(root / "nats").encode() not in cmdline.read_bytes():
            assert time.monotonic() < deadline, "the stand-in never started"
            time.sleep(0.01)
        code, _, err = cairn("clean", "--dir", str(root), env=env)
        assert code == 6 and f"pid {orphan.pid}" in err
        assert root.is_dir()
    finally:
        orphan.kill()
        orphan.wait()


def test_clean_removes_a_stopped_federation_and_its_context(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    root, env = _federation_dir(tmp_path, up_pid=dead.pid)
    code, out, _ = cairn("clean", "--dir", str(root), "--dry-run", env=env)
    assert code == 0 and "would remove" in out and root.is_dir()
    code, out, err = cairn("clean", "--dir", str(root), env=env)
    assert code == 0, err
    assert not root.exists() and not Path(str(env["CAIRN_CONTEXT"])).exists()


def test_clean_leaves_a_folder_cairn_up_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    code, _, err = cairn("clean", "--dir", str(tmp_path / "mine"))
    assert code == 3 and "left alone" in err and (tmp_path / "mine" / "notes.txt").exists()
    assert cairn("clean", "--dir", str(tmp_path / "absent"))[0] == 4


# -- receipts -----------------------------------------------------------------------------


def test_a_hub_role_is_not_gated_and_a_gated_dispatch_without_receipt_is_missing() -> None:
    from datetime import UTC, datetime

    from cairn.events import DeployCommand, JobSubmitted, RecipeRequirement, RoleRequest
    from cairn.evidence.receipts import receipt_row, receipts_hold, why_ungated
    from cairn.evidence.trust import TrustList

    at = datetime(2026, 1, 1, tzinfo=UTC)
    roles = [RoleRequest(name="server", entrypoint="s", placement="hub"),
             RoleRequest(name="client", entrypoint="c", placement="sites")]
    gated = JobSubmitted(id="e1", at=at, source="coordinator@hub", job="j-1", name="n",
                         roles=roles, requires=RecipeRequirement(recipe="cpu-linux-process"))
    plain = JobSubmitted(id="e2", at=at, source="coordinator@hub", job="j-2", name="n",
                         roles=roles)

    def row(submitted: JobSubmitted, role: str) -> dict[str, object]:
        deploy = DeployCommand(id="d", at=at, source="coordinator@hub", job=submitted.job,
                               site="hub" if role == "server" else "site-a", role=role,
                               entrypoint="x")
        return receipt_row(deploy, {}, TrustList(), ungated=why_ungated(submitted, role))

    server, client = row(gated, "server"), row(gated, "client")
    assert server["status"] == "not-gated" and "hub" in str(server["detail"])
    assert client["status"] == "missing" and client["gated"] is True
    assert receipts_hold([server]) and not receipts_hold([server, client])
    assert {row(plain, r)["status"] for r in ("server", "client")} == {"not-gated"}
