"""The job spec: what a data scientist may write, and the reasons for what they may not."""

from __future__ import annotations

import textwrap
from pathlib import Path

import msgspec
import pytest

from cairn.errors import InvalidInput, InvalidName
from cairn.spec import JobSpec, Resources, load_job_spec, parse_job_spec

EXAMPLE = """\
name: fedavg-lr                 # name rule; the job id is generated
study: lung-cancer              # optional; the session's study otherwise
code: ./app
roles:
  server:
    entrypoint: python -m fedavg.server
    resources: {cpus: 1, memory: 512Mi}
  client:
    entrypoint: python -m fedavg.client
    resources: {gpus: 0, cpus: 1, memory: 1Gi}
    sites: all
    min_sites: 2
image: registry.example/fl/numpy:1.2
params: {rounds: 3, lr: 0.1}
timeout: 30m
retries: 0
requires: {recipe: h100-ubuntu-training, max_age: 7d}
"""

MINIMAL = """\
name: tiny
code: app
roles:
  client:
    entrypoint: python main.py
"""

BAD_NAMES = ["s1.>", "*", "A", "a.b", "", "has space"]


@pytest.fixture
def base(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    return tmp_path


def spec(base: Path, text: str) -> JobSpec:
    return parse_job_spec(textwrap.dedent(text), "job.yaml", base)


def error(base: Path, text: str, cls: type[InvalidInput] = InvalidInput) -> InvalidInput:
    with pytest.raises(cls) as info:
        spec(base, text)
    return info.value


def test_the_jobspec_example_parses(base: Path) -> None:
    job = spec(base, EXAMPLE)
    assert job.name == "fedavg-lr" and job.study == "lung-cancer"
    assert job.code == str((base / "app").resolve())
    server, client = job.roles["server"], job.roles["client"]
    assert server.placement == "hub"
    assert server.resources == Resources(gpus=0, millicpus=1000, memory_bytes=512 * 2**20)
    assert client.placement == "sites" and client.sites == "all" and client.min_sites == 2
    assert client.resources.memory_bytes == 2**30
    assert job.params == {"rounds": 3, "lr": 0.1}
    assert (job.timeout_s, job.queue_timeout_s, job.retries) == (1800, 600, 0)
    assert job.requires is not None and job.requires.max_age_s == 7 * 86400


def test_defaults(base: Path) -> None:
    job = spec(base, MINIMAL)
    role = job.roles["client"]
    assert role.resources == Resources(gpus=0, millicpus=1000, memory_bytes=512 * 2**20)
    assert (role.placement, role.sites, role.min_sites) == ("sites", "all", None)
    assert (job.study, job.image, job.timeout_s, job.requires) == (None, None, 3600, None)
    assert role.argv == ["python", "main.py"]


def test_the_parsed_spec_survives_the_wire(base: Path) -> None:
    job = spec(base, EXAMPLE)
    assert msgspec.json.decode(msgspec.json.encode(job), type=JobSpec) == job


def test_load_resolves_code_next_to_the_file(base: Path) -> None:
    (base / "job.yaml").write_text(EXAMPLE)
    assert load_job_spec(base / "job.yaml").code == str((base / "app").resolve())


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="file not found"):
        load_job_spec(tmp_path / "nope.yaml")


def test_placement_can_be_overridden_and_sites_listed(base: Path) -> None:
    job = spec(
        base,
        MINIMAL.replace(
            "python main.py",
            "python main.py\n    sites: [site-a, "
            "site-b]\n    min_sites: 1\n  aggregator:\n    entrypoint: "
            "agg\n    placement: hub",
        ),
    )
    assert job.roles["client"].sites == ("site-a", "site-b")
    assert job.roles["aggregator"].placement == "hub"


# --- errors name file, line and field --------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "field", "line", "says"),
    [
        (
            ("    entrypoint: python main.py", "    entrypoint: python main.py\n    gpu: 1"),
            "roles.client.gpu",
            6,
            "unknown field",
        ),
        (("name: tiny", "name: tiny\ntimeout: soon"), "timeout", 2, "not a duration"),
        (("name: tiny", "name: tiny\nretries: -1"), "retries", 2, "0 or more"),
        (
            (
                "    entrypoint: python main.py",
                "    entrypoint: python main.py\n    resources: {memory: 512m}",
            ),
            "roles.client.resources.memory",
            6,
            "did you mean 'Mi'",
        ),
        (
            ("    entrypoint: python main.py", "    entrypoint: x\n    resources: {gpus: 0.5}"),
            "roles.client.resources.gpus",
            6,
            "whole number",
        ),
        (
            ("    entrypoint: python main.py", "    entrypoint: x\n    resources: {cpus: 0}"),
            "roles.client.resources.cpus",
            6,
            "more than 0",
        ),
        (
            ("    entrypoint: python main.py", "    entrypoint: ''"),
            "roles.client.entrypoint",
            5,
            "must name a command",
        ),
        (
            ("    entrypoint: python main.py", "    resources: {}"),
            "roles.client.entrypoint",
            4,
            "missing required field",
        ),
        (
            ("    entrypoint: python main.py", "    entrypoint: x\n    sites: some"),
            "roles.client.sites",
            6,
            "'all' or a list",
        ),
        (
            ("    entrypoint: python main.py", "    entrypoint: x\n    sites: [a, a]"),
            "roles.client.sites[1]",
            6,
            "listed twice",
        ),
        (
            (
                "    entrypoint: python main.py",
                "    entrypoint: x\n    sites: [a]\n    min_sites: 2",
            ),
            "roles.client.min_sites",
            7,
            "more than the 1 sites",
        ),
        (
            ("    entrypoint: python main.py", "    entrypoint: x\n    min_sites: 0"),
            "roles.client.min_sites",
            6,
            "1 or more",
        ),
        (
            (
                "  client:\n    entrypoint: python main.py",
                "  server:\n    entrypoint: x\n    sites: [a]",
            ),
            "roles.server.sites",
            6,
            "hub role",
        ),
        (("name: tiny", "name: tiny\nimage: 'Registry/X Y'"), "image", 2, "not an image"),
        (("name: tiny", "name: tiny\nimage: reg.example/x@sha256:abc"), "image", 2, "digest"),
        (("name: tiny", "name: tiny\nparams: {when: 2024-01-01}"), "params.when", 2, "JSON"),
        (
            ("name: tiny", "name: tiny\nrequires: {max_age: 1d}"),
            "requires.recipe",
            2,
            "missing required",
        ),
        (("name: tiny", "name: tiny\nname: again"), "name", 2, "duplicate key"),
    ],
)
def test_errors_name_file_line_and_field(
    base: Path, edit: tuple[str, str], field: str, line: int, says: str
) -> None:
    exc = error(base, MINIMAL.replace(*edit))
    assert (exc.file, exc.field, exc.line) == ("job.yaml", field, line)
    assert says in exc.message
    assert str(exc).startswith(f"job.yaml:{line}: {field}: ")


def test_roles_are_required(base: Path) -> None:
    exc = error(base, "name: x\ncode: app\nroles: {}\n")
    assert exc.field == "roles" and "at least one role" in exc.message


# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_NAMES)
@pytest.mark.parametrize(
    ("template", "field"),
    [
        ("name: '{}'\ncode: app\nroles: {{c: {{entrypoint: x}}}}", "name"),
        ("name: j\nstudy: '{}'\ncode: app\nroles: {{c: {{entrypoint: x}}}}", "study"),
        ("name: j\ncode: app\nroles: {{'{}': {{entrypoint: x}}}}", "roles.{}"),
        (
            "name: j\ncode: app\nroles: {{c: {{entrypoint: x, sites: [ok, '{}']}}}}",
            "roles.c.sites[1]",
        ),
        (
            "name: j\ncode: app\nroles: {{c: {{entrypoint: x}}}}\nrequires: {{recipe: '{}'}}",
            "requires.recipe",
        ),
    ],
)
def test_bad_names_are_refused_in_every_name_field(
    base: Path, template: str, field: str, bad: str
) -> None:
    exc = error(base, template.format(bad), InvalidName)
    assert exc.field == field.format(bad) and exc.file == "job.yaml" and exc.line is not None
    assert "name" in exc.message


# --- what a job may never carry -----------------------------------------------------------


@pytest.mark.parametrize(
    ("snippet", "field", "why"),
    [
        ("mounts: [/srv/data:/data]", "roles.client.mounts", "cannot name host paths or mounts"),
        ("volumes: [{hostPath: /etc}]", "roles.client.volumes", "host paths or mounts"),
        ("hostPath: /etc", "roles.client.hostPath", "host paths or mounts"),
        ("env: {FOO: bar}", "roles.client.env", "cannot set environment variables"),
        ("env: {CAIRN_STUDY: other}", "roles.client.env", "CAIRN_STUDY would shadow"),
        ("secrets: {DB: hunter2}", "roles.client.secrets", "cannot carry secrets"),
        ("secret_env: {DB: env:X}", "roles.client.secret_env", "cannot carry secrets"),
        ("platform: kubernetes", "roles.client.platform", "cannot choose a platform"),
        ("backend: slurm", "roles.client.backend", "cannot choose a platform"),
        (
            "resources: {cpus: 1, nodeSelector: {gpu: a100}}",
            "roles.client.resources.nodeSelector",
            "cannot choose a platform",
        ),
    ],
)
def test_forbidden_role_keys_say_why(base: Path, snippet: str, field: str, why: str) -> None:
    exc = error(base, MINIMAL + f"    {snippet}\n")
    assert exc.field == field and why in exc.message and exc.line == 6
    assert "study_runtime.yaml" in exc.message or "site" in exc.message


@pytest.mark.parametrize(
    ("snippet", "field", "why"),
    [
        ("env: {CAIRN_NATS_URL: nats://evil:4222}", "env", "CAIRN_NATS_URL would shadow"),
        ("mounts: [/data]", "mounts", "host paths"),
        ("docker: {privileged: true}", "docker", "platform"),
        ("params: {db_password: hunter2}", "params.db_password", "looks like a secret"),
        ("params: {opt: {apiKey: abc}}", "params.opt.apiKey", "looks like a secret"),
        ("params: {k: '-----BEGIN RSA PRIVATE KEY-----x'}", "params.k", "private key"),
    ],
)
def test_forbidden_top_level_keys_say_why(base: Path, snippet: str, field: str, why: str) -> None:
    exc = error(base, f"{snippet}\n" + MINIMAL)
    assert exc.field == field and why in exc.message and exc.line == 1


def test_ordinary_params_pass(base: Path) -> None:
    job = spec(base, MINIMAL + "params: {tokenizer: bpe, max_tokens: 5, env_name: x}\n")
    assert job.params["tokenizer"] == "bpe"


@pytest.mark.parametrize("code", ["/etc", "../outside", "app/../../x", "~/app", ""])
def test_code_must_be_a_folder_next_to_the_spec(base: Path, code: str) -> None:
    exc = error(base, MINIMAL.replace("code: app", f"code: '{code}'"))
    assert exc.field == "code" and exc.line == 2
    assert "must be a folder next to the job spec, not a host path" in exc.message


def test_code_symlink_out_of_the_folder_is_refused(
    base: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    (base / "link").symlink_to(tmp_path_factory.mktemp("elsewhere"))
    exc = error(base, MINIMAL.replace("code: app", "code: link"))
    assert "outside the job spec's folder" in exc.message


def test_code_folder_must_exist(base: Path) -> None:
    exc = error(base, MINIMAL.replace("code: app", "code: nope"))
    assert exc.field == "code" and "no such folder" in exc.message


def test_a_role_may_span_several_nodes_within_bounds(base: Path) -> None:
    job = spec(base, """\
        name: ddp
        code: ./app
        roles:
          trainer:
            entrypoint: python train.py
            resources: {gpus: 4, cpus: 8, memory: 64Gi, nodes: 2}
        """)
    role = job.roles["trainer"]
    assert role.nodes == 2 and role.resources.gpus == 4  # per node
    assert spec(base, MINIMAL).roles["client"].nodes == 1
    for nodes, says in (("0", "must be 1 or more"), ("5000", "more than the limit of 4096"),
                        ("two", "expected `int`")):
        err = error(base, f"""\
            name: ddp
            code: ./app
            roles:
              trainer:
                entrypoint: python train.py
                resources: {{nodes: {nodes}}}
            """)
        assert says in str(err) and "job.yaml:6" in str(err), str(err)
