"""The strict `slurm:` section of study_runtime.yaml: every key known, every type checked, each
error naming file, line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cairn.errors import InvalidInput
from cairn.spec.runtime import SlurmSettings, parse_study_runtime

TEXT = """\
format: 1
studies:
  lung:
    slurm:
      partition: gpu
      account: lung
      qos: normal
      time: "02:00:00"
      constraint: a100
      reservation: maint
      sandbox: pyxis
"""


def parse(text: str) -> SlurmSettings:
    runtime = parse_study_runtime(textwrap.dedent(text), "study_runtime.yaml", Path("/etc"))
    settings = runtime.studies["lung"].slurm
    assert settings is not None
    return settings


def test_every_setting_is_read() -> None:
    assert parse(TEXT) == SlurmSettings(partition="gpu", account="lung", qos="normal",
                                        time="02:00:00", constraint="a100",
                                        reservation="maint", sandbox="pyxis")


@pytest.mark.parametrize(("old", "new", "field", "line", "says"), [
    ("qos: normal", "qoss: normal", "studies.lung.slurm.qoss", 7, "unknown field"),
    ("sandbox: pyxis", "sandbox: docker", "studies.lung.slurm.sandbox", 11, "docker"),
    ("account: lung", "account: [lung]", "studies.lung.slurm.account", 6, "str"),
    ('time: "02:00:00"', "time: 2h", "studies.lung.slurm.time", 8, "not a Slurm time"),
])
def test_a_bad_key_or_value_names_file_line_and_field(old: str, new: str, field: str,
                                                      line: int, says: str) -> None:
    assert old in TEXT
    with pytest.raises(InvalidInput) as info:
        parse(TEXT.replace(old, new))
    exc = info.value
    assert (exc.file, exc.field, exc.line) == ("study_runtime.yaml", field, line), exc
    assert says.lower() in exc.message.lower()


SITE = """\
site: site-a
federation: nats://127.0.0.1:4222
backend: slurm
workdir: /shared/cairn
inventory: {gpus: 0, cpus: 2, memory: 1Gi}
slurm:
  driver: rest
  url: unix:/run/slurmrestd.sock
  user: cairn
  token_file: secrets/slurm.jwt
"""


def site(text: str) -> object:
    from cairn.spec.site import parse_site_config

    return parse_site_config(text, "site.yaml", Path("/etc/cairn"))


def test_the_site_says_how_to_reach_slurm() -> None:
    from cairn.spec.site import SiteConfig, SlurmCluster

    cfg = site(SITE)
    assert isinstance(cfg, SiteConfig)
    assert cfg.slurm == SlurmCluster(driver="rest", url="unix:/run/slurmrestd.sock",
                                     user="cairn", token_file="/etc/cairn/secrets/slurm.jwt")


@pytest.mark.parametrize(("old", "new", "field", "says"), [
    ("user: cairn", "users: cairn", "slurm.users", "unknown field"),
    ("driver: rest", "driver: ssh", "slurm.driver", "ssh"),
    ("  token_file: secrets/slurm.jwt\n", "", "slurm.driver", "token_file or jwt_key"),
    ("url: unix:/run/slurmrestd.sock", "url: ftp://x", "slurm.url", "unix:/path"),
    ("driver: rest", "driver: cli", "slurm.url", "belongs to driver rest"),
])
def test_a_bad_slurm_section_names_its_field(old: str, new: str, field: str, says: str) -> None:
    with pytest.raises(InvalidInput) as info:
        site(SITE.replace(old, new))
    assert (info.value.file, info.value.field) == ("site.yaml", field), info.value
    assert says in info.value.message
