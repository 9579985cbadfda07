"""Write docs/cli.md, the reference of every `cairn` command, from the click commands.

    .venv/bin/python tools/cli_docs.py           # write docs/cli.md
    .venv/bin/python tools/cli_docs.py --check   # exit 1 when docs/cli.md is stale

Everything comes from the commands' own help texts and options, so the reference cannot miss
a command or describe an option that no longer exists.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import click

from cairn.cli.main import cli
from cairn.errors import EXIT_CODES

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "docs" / "cli.md"
HEADER = """# `cairn` command reference

Generated from the commands by `tools/cli_docs.py` (`make cli-docs`): do not edit. How to
point a session at a federation, the output formats and the exit codes are in
[cli-guide.md](cli-guide.md).
"""


CONVENTIONS = (
    ("`-o`, `--output table\\|json\\|yaml`", "always the output format; `table` for people, "
     "`json`/`yaml` stable fields for programs. Anything else (`-o out/`) is a usage error, "
     "exit 2"),
    ("`--out DIR\\|FILE`", "where a command writes files (`bundle`, `provision`, `validate`, "
     "`snapshot`, `job fetch`)"),
    ("`--study`", "every command that works in a study defaults it to `$CAIRN_STUDY`, else "
     "the context file's `study`"),
    ("ids and names", "a job id (`JOB`, `--job`) or a recipe name (`NAME`, `--recipe` of "
     "`bundle`) may be any unique prefix, git-style; a job id also without its `j-`. An exact "
     "match wins; a prefix that matches several is an error listing them (exit 3)"),
    ("tables", "never cut an id or a name: other columns wrap, or are left out (the caption "
     "says which) when the terminal, or `$COLUMNS` on a pipe (else 80), is too narrow; "
     "`--wide` shows every column at full width"),
    ("values", "results and other free-form values print as YAML in the table view"),
    ("criteria", "every `cairn recipe` command takes `--service --accelerator --os --intent "
     "--platform --scheduler --nodes` and `--criteria FILE`"),
    ("errors", "one line on stderr, `error: [file:line: ][field: ]message`; never a "
     "traceback"),
)


def conventions() -> str:
    """The conventions and the exit codes, from `CONVENTIONS` and `cairn.errors.EXIT_CODES`."""
    rows = "\n".join(f"| {what} | {meaning} |" for what, meaning in CONVENTIONS)
    codes = "\n".join(f"| {code} | {_escape(meaning)} | {f'`{cls}`' if cls else ''} |"
                      for code, meaning, cls in EXIT_CODES)
    return ("\n## Conventions\n\nThe same on every command.\n\n| convention | what |\n"
            f"|---|---|\n{rows}\n\n### Exit codes\n\nOne meaning per code, on every "
            f"command (`cairn.errors.EXIT_CODES`):\n\n| code | meaning | error |\n|---|---|---|"
            f"\n{codes}\n")


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _prose(doc: str) -> str:
    """A help text as Markdown: indented paragraphs (examples) become code blocks."""
    out = []
    for para in click.unstyle(doc).replace("\b\n", "").split("\n\n"):
        lines = [line for line in para.splitlines() if line.strip()]
        if lines and all(line.startswith((" ", "\t")) for line in lines):
            out.append("```\n" + "\n".join(line.strip() for line in lines) + "\n```")
        elif lines:
            out.append("\n".join(lines))
    return "\n\n".join(out)


def _option_row(param: click.Parameter, ctx: click.Context) -> str | None:
    if not isinstance(param, click.Option) or param.hidden or "--help" in param.opts:
        return None
    names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
    if not param.is_flag and param.metavar != "":
        names += f" `{param.make_metavar(ctx)}`" if param.type.name != "boolean" else ""
    extra = []
    if param.envvar:
        extra.append(f"env `{param.envvar}`")
    if param.show_default and param.default not in (None, (), False):
        # A default under this checkout is written relative to it: the reference must read
        # the same on every machine.
        default = str(param.default).replace(str(REPO) + "/", "")
        extra.append(f"default `{default}`")
    help_text = _escape((param.help or "").strip())
    if extra:
        help_text += f" ({', '.join(extra)})"
    return f"| {_escape(names)} | {help_text} |"


def _section(cmd: click.Command, path: list[str], ctx: click.Context, out: list[str]) -> None:
    name = " ".join(path)
    sub_ctx = click.Context(cmd, info_name=path[-1], parent=ctx)
    out.append(f"\n## `{name}`\n")
    doc = (cmd.help or "").strip()
    if doc:
        out.append(_prose(doc) + "\n")
    pieces = " ".join(cmd.collect_usage_pieces(sub_ctx))
    out.append(f"```\n{name} {pieces}\n```\n")
    rows = [r for p in cmd.get_params(sub_ctx) if (r := _option_row(p, sub_ctx))]
    if rows:
        out.append("| option | meaning |\n|---|---|\n" + "\n".join(rows) + "\n")
    if isinstance(cmd, click.Group):
        for sub in cmd.list_commands(sub_ctx):
            child = cmd.get_command(sub_ctx, sub)
            if child is not None and not child.hidden:
                _section(child, [*path, sub], sub_ctx, out)


def render() -> str:
    ctx = click.Context(cli, info_name="cairn")
    out = [HEADER, conventions()]
    top = cli.list_commands(ctx)
    out.append("\n| command | what it does |\n|---|---|\n" + "\n".join(
        f"| [`cairn {n}`](#cairn-{n}) | {_escape(c.get_short_help_str(90))} |"
        for n in top if (c := cli.get_command(ctx, n)) is not None) + "\n")
    for name in top:
        command = cli.get_command(ctx, name)
        if command is not None:
            _section(command, ["cairn", name], ctx, out)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when docs/cli.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not TARGET.is_file() or TARGET.read_text(encoding="utf-8") != text:
            print("docs/cli.md is stale: run `make cli-docs`", file=sys.stderr)
            return 1
        print("docs/cli.md is up to date")
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
