"""`cairn keys create NAME`: an Ed25519 key pair for signing evidence and receipts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import click
import yaml

from cairn.cli.output import emit, output_option
from cairn.evidence.keys import create_key_files, key_paths
from cairn.evidence.trust import ROLES, Role, trust_entry
from cairn.names import check_name


@click.group(help="Create signing keys (Ed25519).")
def keys() -> None:
    pass


CREATE_HELP = """Create the Ed25519 key pair NAME: DIR/NAME.key (private, mode 0600) and
DIR/NAME.pub (public). The key id is the sha256 of the raw public key.

\b
Prints the trust-list entry for the public key: add it under `signers:` of
the trust list of whoever should trust this key (`cairn evidence verify
--trust`). Never share the .key file.

\b
Exit codes: 0 created; 3 bad name; 6 the key exists (use --force).
"""


@keys.command("create", help=CREATE_HELP)
@click.argument("name")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".cairn") / "keys", show_default=True,
              help="Where to write the key files.")
@click.option("--role", type=click.Choice(ROLES), default="site", show_default=True,
              help="The role printed in the trust-list entry.")
@click.option("--force", is_flag=True, default=False, help="Replace an existing key pair.")
@output_option()
def create(name: str, directory: Path, role: str, force: bool, output: str) -> None:
    check_name(name, "key name")
    key = create_key_files(directory / name, overwrite=force)
    private, public = key_paths(directory / name)
    entry = trust_entry(name, cast(Role, role), key.verifying_key)
    result: dict[str, Any] = {"name": name, "key_id": key.key_id, "private": str(private),
                              "public": str(public), "trust_entry": entry}

    def show(data: dict[str, Any]) -> None:
        click.echo(f"key id   {data['key_id']}")
        click.echo(f"private  {data['private']} (mode 0600: keep it secret)")
        click.echo(f"public   {data['public']}")
        click.echo("trust-list entry (under `signers:`):")
        click.echo(yaml.safe_dump([data["trust_entry"]], sort_keys=False).rstrip())

    emit(result, output, show)
