"""The client commands as a user meets them: help, bad input, no federation."""

from __future__ import annotations

import textwrap
from pathlib import Path

import click
import pytest

from cairn.cli.main import cli
from tests.cli_runner import cairn

GROUPS = ("study", "job", "site", "events", "replay", "deadletter")


@pytest.fixture
def nowhere(tmp_path: Path) -> dict[str, str | None]:
    """An environment with no context file and no CAIRN_NATS_URL."""
    return {
        "CAIRN_CONTEXT": str(tmp_path / "absent" / "context.yaml"),
        "CAIRN_NATS_URL": None,
        "CAIRN_STUDY": None,
        "CAIRN_ACTOR": None,
    }


def every_command() -> list[tuple[str, ...]]:
    ctx = click.Context(cli)
    out: list[tuple[str, ...]] = []
    for name in GROUPS:
        command = cli.get_command(ctx, name)
        assert command is not None, name
        out.append((name,))
        if isinstance(command, click.Group):
            out.extend((name, sub) for sub in command.list_commands(ctx))
    return out


@pytest.mark.parametrize("path", every_command(), ids=" ".join)
def test_help_of_every_command_says_what_it_does(path: tuple[str, ...]) -> None:
    code, out, _ = cairn(*path, "--help")
    assert code == 0
    assert "Usage: " in out
    # A summary line under Usage, not an empty help.
    assert len(out.split("\n\n")[1].strip()) > 10


def test_submit_help_says_the_request_is_signed() -> None:
    code, out, _ = cairn("job", "submit", "--help")
    assert code == 0
    assert "signed" in out and "TAKEN ON TRUST" not in out


def test_submit_of_a_bad_spec_names_file_line_and_field(
    tmp_path: Path, nowhere: dict[str, str | None]
) -> None:
    (tmp_path / "app").mkdir()
    spec = tmp_path / "job.yaml"
    spec.write_text(
        textwrap.dedent("""\
        name: demo
        code: app
        roles:
          client:
            entrypoint: python main.py
            resources: {gpus: 1, cpus: 1, memroy: 1Gi}
        """)
    )
    code, out, err = cairn("job", "submit", str(spec), env=nowhere)
    assert code == 3
    assert f"{spec}:6: roles.client.resources.memroy" in err
    assert "Traceback" not in err + out
    assert len(err.strip().splitlines()) == 1


def test_submit_of_a_missing_file_is_invalid_input(
    tmp_path: Path, nowhere: dict[str, str | None]
) -> None:
    code, _, err = cairn("job", "submit", str(tmp_path / "nope.yaml"), env=nowhere)
    assert code == 3
    assert "nope.yaml: file not found" in err


@pytest.mark.parametrize(
    "args",
    [
        ("study", "list"),
        ("study", "show", "--study", "lung"),
        ("job", "list", "--study", "lung"),
        ("job", "show", "j-1", "--study", "lung"),
        ("site", "list"),
        ("events", "tail", "--study", "lung"),
        ("replay", "--study", "lung"),
        ("deadletter", "list"),
    ],
    ids=" ".join,
)
def test_without_a_federation_commands_exit_7_with_one_clear_line(
    args: tuple[str, ...], nowhere: dict[str, str | None]
) -> None:
    code, out, err = cairn(*args, env=nowhere)
    assert code == 7
    assert "no federation found" in err
    assert "CAIRN_NATS_URL" in err
    assert "cairn up" in err
    assert "Traceback" not in err + out


def test_an_unreachable_nats_url_fails_with_exit_7_instead_of_hanging(
    nowhere: dict[str, str | None],
) -> None:
    env = {**nowhere, "CAIRN_NATS_URL": "nats://127.0.0.1:1"}
    code, _, err = cairn("study", "list", env=env)
    assert code == 7
    assert "cannot reach NATS at nats://127.0.0.1:1" in err


@pytest.mark.parametrize("admin", ["alice", "alice:org-a", "alice:org-a:boss", "::lead"])
def test_a_malformed_admin_is_invalid_input(admin: str, nowhere: dict[str, str | None]) -> None:
    code, _, err = cairn("study", "create", "lung", "--admin", admin, env=nowhere)
    assert code == 3
    assert "admin" in err


def test_unknown_flag_is_a_usage_error() -> None:
    code, _, err = cairn("job", "list", "--nope")
    assert code == 2
    assert "No such option" in err
