"""site.yaml: the operator's site config."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cairn.errors import InvalidInput, InvalidName
from cairn.spec import Resources, SiteConfig, discover_inventory, load_site_config
from cairn.spec.site import parse_site_config

EXAMPLE = """\
site: site-a                     # name rule; must be in federation.yaml
federation: nats://hub.example:4222
worker_nats_url: nats://127.0.0.1:4222
backend: process
inventory: {gpus: 0, cpus: 2, memory: 8Gi}
workdir: /var/lib/cairn/site-a
runtime: local/study_runtime.yaml
"""

FOUND = Resources(gpus=0, millicpus=16000, memory_bytes=64 * 2**30)


def site(text: str, base: Path = Path("/etc/cairn")) -> SiteConfig:
    return parse_site_config(textwrap.dedent(text), "site.yaml", base, discover=lambda: FOUND)


def error(text: str, cls: type[InvalidInput] = InvalidInput) -> InvalidInput:
    with pytest.raises(cls) as info:
        site(text)
    return info.value


def test_the_jobspec_example_parses(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(EXAMPLE)
    config = load_site_config(tmp_path / "site.yaml")
    assert (config.site, config.backend) == ("site-a", "process")
    assert config.federation == "nats://hub.example:4222"
    assert config.worker_nats_url == "nats://127.0.0.1:4222"
    assert config.inventory == Resources(gpus=0, millicpus=2000, memory_bytes=8 * 2**30)
    assert config.workdir == "/var/lib/cairn/site-a"
    assert config.runtime == str((tmp_path / "local/study_runtime.yaml").resolve())


def test_omitted_inventory_is_discovered_field_by_field() -> None:
    config = site(
        EXAMPLE.replace("inventory: {gpus: 0, cpus: 2, memory: 8Gi}", "inventory: {cpus: 3}")
    )
    assert config.inventory == Resources(
        gpus=0, millicpus=3000, memory_bytes=FOUND.memory_bytes
    )
    whole = site(EXAMPLE.replace("inventory: {gpus: 0, cpus: 2, memory: 8Gi}\n", ""))
    assert whole.inventory == FOUND


def test_gpu_ids_give_the_gpu_count() -> None:
    config = site(
        EXAMPLE.replace("inventory: {gpus: 0, cpus: 2, memory: 8Gi}", "gpu_ids: [0, GPU-3f2a]")
    )
    assert config.gpu_ids == ("0", "GPU-3f2a")
    assert config.inventory.gpus == 2


def test_worker_url_defaults_to_the_federation_and_paths_resolve(tmp_path: Path) -> None:
    config = site(
        EXAMPLE.replace("worker_nats_url: nats://127.0.0.1:4222\n", "").replace(
            "/var/lib/cairn/site-a", "work"
        ),
        tmp_path,
    )
    assert config.worker_nats_url == "nats://hub.example:4222"
    assert config.workdir == str(tmp_path / "work")


def test_discovery_reads_this_machine() -> None:
    found = discover_inventory()
    assert found.gpus == 0 and found.millicpus >= 1000 and found.memory_bytes > 2**20


@pytest.mark.parametrize(
    ("old", "new", "field", "line", "says"),
    [
        ("backend: process", "backend: podman", "backend", 4, "invalid enum value"),
        ("nats://hub.example:4222", "http://hub.example", "federation", 2, "not a nats url"),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:99999", "worker_nats_url", 3, "bad port"),
        ("memory: 8Gi", "memory: 8GB", "inventory.memory", 5, "unknown memory suffix"),
        ("gpus: 0, cpus: 2", "gpus: 1.5, cpus: 2", "inventory.gpus", 5, "whole number"),
        (
            "runtime: local/study_runtime.yaml",
            "runtime: r.yaml\ngpu_ids: [0, 1]",
            "inventory.gpus",
            5,
            "gpu_ids lists 2",
        ),
        ("runtime: local", "runtimes: local", "runtimes", 7, "unknown field"),
        ("gpus: 0,", "gpus: 0, disk: 1Ti,", "inventory.disk", 5, "unknown field"),
        ("workdir: /var/lib/cairn/site-a\n", "", "workdir", 1, "missing required field"),
    ],
)
def test_errors_name_file_line_and_field(
    old: str, new: str, field: str, line: int, says: str
) -> None:
    exc = error(EXAMPLE.replace(old, new))
    assert (exc.file, exc.field, exc.line) == ("site.yaml", field, line)
    assert says.lower() in exc.message.lower()


@pytest.mark.parametrize("bad", ["s1.>", "*", "A", "a.b", ""])
def test_bad_site_names_are_refused(bad: str) -> None:
    exc = error(EXAMPLE.replace("site: site-a", f"site: '{bad}'"), InvalidName)
    assert (exc.field, exc.line) == ("site", 1)


def test_process_isolation_defaults_to_the_strongest_available() -> None:
    config = site(EXAMPLE)
    assert (config.process.sandbox, config.process.worker_uids) == ("auto", "auto")
    assert config.process.read_only == ()


def test_process_isolation_settings_parse() -> None:
    config = site(EXAMPLE + "process: {sandbox: none, worker_uids: 1600000000-1600000099, "
                  "read_only: [/opt/conda]}\n")
    assert config.process.sandbox == "none"
    assert config.process.worker_uids == "1600000000-1600000099"
    assert config.process.read_only == ("/opt/conda",)


@pytest.mark.parametrize(("section", "says"), [
    ("{sandbx: none}", "process.sandbx: unknown field"),
    ("{sandbox: firejail}", "process.sandbox"),
    ("{worker_uids: 0-99}", "process.worker_uids: '0-99': use uids from 1000"),
    ("{worker_uids: 60000-70000}", "holds 65534"),
    ("{worker_uids: 2000-1000}", "first uid is above the last"),
    ("{worker_uids: lots}", "is not FIRST-LAST"),
    ("{read_only: [opt/conda]}", "process.read_only[0]: 'opt/conda': give an absolute path"),
])
def test_bad_process_settings_name_the_field(section: str, says: str) -> None:
    err = error(EXAMPLE + f"process: {section}\n")
    assert says in str(err) and err.file == "site.yaml" and err.line == 8
