"""docs/cli.md is generated from the commands: it names every command and is current."""

from __future__ import annotations

import click

from cairn.cli.main import cli
from tools.cli_docs import TARGET, render


def test_the_committed_reference_is_current() -> None:
    assert TARGET.read_text(encoding="utf-8") == render(), "run `make cli-docs`"


def test_the_reference_names_every_command_and_subcommand() -> None:
    text = render()
    ctx = click.Context(cli, info_name="cairn")
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        assert f"## `cairn {name}`" in text
        if isinstance(command, click.Group):
            sub_ctx = click.Context(command, info_name=name, parent=ctx)
            for sub in command.list_commands(sub_ctx):
                assert f"## `cairn {name} {sub}`" in text
    for must in ("job fetch", "up", "down", "demo", "run", "diff"):
        assert f"## `cairn {must}`" in text
