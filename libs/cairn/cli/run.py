"""`cairn run SERVICE...`: run one or several services in one process over one connection."""

from __future__ import annotations

import sys

import click

from cairn.runtime.service import SERVICES


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                 "help_option_names": []},
               add_help_option=False,
               help=f"Run services ({', '.join(SERVICES)}) in one process. `cairn run --help` "
                    "lists the flags.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(args: tuple[str, ...]) -> None:
    from cairn.runtime.service import main

    sys.exit(main(list(args)))
