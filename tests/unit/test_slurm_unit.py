"""deploy/slurm/: the systemd unit of a Slurm site's parent parses, names only keys systemd
knows, and starts a valid `cairn run`; its environment file and site.yaml are what that
command reads."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from cairn.runtime.service import parse_args
from cairn.spec.site import load_site_config

SLURM = Path(__file__).resolve().parents[2] / "deploy" / "slurm"
UNIT = SLURM / "cairn-site.service"
ENV_FILE = SLURM / "cairn-site.env"

# The keys this unit may use, per section (systemd.unit(5), systemd.service(5),
# systemd.exec(5), systemd.kill(5)): a typo is an error here, where systemd only warns.
KNOWN_KEYS = {
    "Unit": {"Description", "Documentation", "After", "Wants", "Requires", "Before"},
    "Service": {"Type", "User", "Group", "EnvironmentFile", "Environment", "ExecStart",
                "WorkingDirectory", "StateDirectory", "KillMode", "KillSignal",
                "TimeoutStopSec", "Restart", "RestartSec", "NoNewPrivileges", "ProtectSystem",
                "ProtectHome", "PrivateTmp", "ReadWritePaths"},
    "Install": {"WantedBy"},
}


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> values (a key may repeat), as systemd reads a unit file: `#` and
    `;` lines are comments, a trailing backslash continues a line."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    logical: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.endswith("\\"):
            logical.append(line[:-1] + " ")
            continue
        line = "".join(logical) + line
        logical = []
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        if current is None or "=" not in line:
            raise ValueError(f"not a unit file line: {raw!r}")
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def unknown_keys(sections: dict[str, dict[str, list[str]]]) -> list[str]:
    return sorted(f"[{name}] {key}" for name, keys in sections.items()
                  for key in keys if key not in KNOWN_KEYS.get(name, set()))


def env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            values[key] = value
    return values


def test_the_unit_parses_and_names_only_known_keys() -> None:
    sections = parse_unit(UNIT.read_text())
    assert set(sections) == {"Unit", "Service", "Install"}
    assert unknown_keys(sections) == []
    service = sections["Service"]
    assert service["EnvironmentFile"] == ["/etc/cairn/cairn-site.env"]
    assert len(service["ExecStart"]) == 1
    assert sections["Install"]["WantedBy"] == ["multi-user.target"]
    # A site workdir outside ReadWritePaths would make every launch fail on a read-only fs.
    workdir = load_site_config(SLURM / "site.yaml").workdir
    assert any(Path(workdir).is_relative_to(p) for p in service["ReadWritePaths"]), workdir


def test_the_key_check_catches_a_typo() -> None:
    broken = UNIT.read_text().replace("KillMode=", "KilMode=")
    assert unknown_keys(parse_unit(broken)) == ["[Service] KilMode"]


def test_exec_start_is_a_valid_cairn_run_with_the_environment_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_file(ENV_FILE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    argv = shlex.split(parse_unit(UNIT.read_text())["Service"]["ExecStart"][0])
    assert Path(argv[0]).name == "cairn" and argv[1] == "run"
    names, config = parse_args(argv[2:])
    assert names == ["agent", "launcher", "snapshotter"]
    assert config.site_config == "/etc/cairn/site.yaml"
    assert config.log_format == "json"
    # Every variable of the file reaches the parent's config.
    assert (config.nats_url, config.site, config.creds, config.tls_ca, config.log_level) == (
        env["CAIRN_NATS_URL"], env["CAIRN_SITE"], env["CAIRN_CREDS"], env["CAIRN_TLS_CA"],
        env["CAIRN_LOG_LEVEL"])
    assert config.nats_url.startswith("tls://")


def test_the_example_site_yaml_is_a_rest_driver_slurm_site() -> None:
    site = load_site_config(SLURM / "site.yaml")
    assert site.site == env_file(ENV_FILE)["CAIRN_SITE"]
    assert site.backend == "slurm"
    assert site.slurm is not None and site.slurm.driver == "rest"


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    """Where systemd-analyze is installed (Debian's systemd), it verifies the unit in a
    throwaway root holding the unit, the system's own units and a stand-in ExecStart
    binary; elsewhere the key check above is what runs."""
    analyze = shutil.which("systemd-analyze")
    system_units = Path("/lib/systemd/system")
    if analyze is None or not (system_units / "sysinit.target").exists():
        pytest.skip("systemd-analyze is not installed (apt-get install systemd); "
                    "the unit's keys are checked by the other tests")
    root = tmp_path / "root"
    shutil.copytree(system_units, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc" / "systemd" / "system" / UNIT.name)
    binary = Path(shlex.split(parse_unit(UNIT.read_text())["Service"]["ExecStart"][0])[0])
    stand_in = root / binary.relative_to("/")
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    done = subprocess.run([analyze, "verify", f"--root={root}", UNIT.name], capture_output=True,
                          text=True, timeout=60, check=False)
    # systemd only warns about unknown keys and bad values: any output is a finding.
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done
