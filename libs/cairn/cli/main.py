"""The `cairn` command: parses, calls `cairn.client` (or a library function), prints.

Commands are loaded lazily so `cairn --help` and short commands start fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import click

from cairn.errors import EXIT_CODES, INTERRUPTED_EXIT, CairnError

# name -> "module:attribute" of a click command. One line per command group.
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("cairn.cli.up:up", "Start an embedded federation on this machine."),
    "down": ("cairn.cli.up:down", "Stop the embedded federation started by `cairn up`."),
    "clean": ("cairn.cli.clean:clean", "Remove a stopped embedded federation's state (.cairn)."),
    "sim": ("cairn.cli.sim:sim", "Run a job on N simulated sites of this machine."),
    "sim-sites": ("cairn.cli.simsites:sim_sites",
                  "Drive one coordinator with N simulated sites and check it."),
    "demo": ("cairn.cli.demo:demo", "Start a federation, run the demo job, print the timeline."),
    "run": ("cairn.cli.run:run", "Run one or several services in one process."),
    "deadletter": ("cairn.cli.deadletter:deadletter", "Inspect and redrive dead-lettered events."),
    "events": ("cairn.cli.events:events", "Read the event streams."),
    "study": ("cairn.cli.study:study", "Create and change studies."),
    "job": ("cairn.cli.job:job", "Submit, watch and manage jobs."),
    "site": ("cairn.cli.site:site", "List and show sites."),
    "replay": ("cairn.cli.replay:replay", "Fold a study's stream and print state and timeline."),
    "snapshot": ("cairn.cli.snapshot:snapshot", "Record what a site really is."),
    "diff": ("cairn.cli.snapshot:diff", "Compare two snapshots."),
    "recipe": ("cairn.cli.recipe:recipe", "List, match, show and explain recipes."),
    "bundle": ("cairn.cli.bundle:bundle", "Render a recipe for Helm, Argo CD, Flux or Helmfile."),
    "validate": ("cairn.cli.validate:validate", "Validate a site against a recipe."),
    "keys": ("cairn.cli.keys:keys", "Create Ed25519 signing keys."),
    "provision": ("cairn.cli.provision:provision", "Provision identities and startup kits."),
    "evidence": ("cairn.cli.evidence:evidence", "Verify signed evidence; eligibility; submit."),
    "api": ("cairn.cli.apicmd:api", "The HTTP API: its URL, bearer tokens, signed requests."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, (target, _) in COMMANDS.items() if _available(target))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry[0].split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None
            raise
        command = getattr(module, attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _available(target: str) -> bool:
    module_name = target.split(":")[0]
    return importlib.util.find_spec(module_name) is not None


HELP = """Cairn runs federated jobs across independent sites and proves what each site is.

\b
Finding the bus: commands read the context file written by `cairn up`
(.cairn/context.yaml, or $CAIRN_CONTEXT); $CAIRN_NATS_URL overrides it.
A session is bound to one study (--study or $CAIRN_STUDY).

\b
Identity: every request is signed with the credential of your startup kit
(context file `creds`, or $CAIRN_CREDS); the coordinator acts as, and records,
the identity that signed it, and the broker lets it reach only its own studies.
Only a federation started with `cairn up --insecure` takes --actor on trust.

\b
Conventions: -o is always the output format (table|json|yaml), --out the
folder or file to write; --study defaults to $CAIRN_STUDY, else the context
file; a job id or recipe name may be any unique prefix; tables never cut an
id or a name (--wide shows every column).

\b
Exit codes, the same on every command:
""" + "\n".join(f"  {code:<4}{meaning.split(':')[0]}" for code, meaning, _ in EXIT_CODES) + "\n"


@click.group(cls=LazyGroup, help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cairn", prog_name="cairn")
def cli() -> None:
    pass


def main(argv: list[str] | None = None) -> Any:
    """Entry point: run the CLI, turning Cairn errors into one line and an exit code."""
    try:
        return cli.main(args=argv, standalone_mode=False)
    except CairnError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(INTERRUPTED_EXIT)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED_EXIT)


if __name__ == "__main__":
    main()
