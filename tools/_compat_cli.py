"""The CLI as a public surface, described from the click commands themselves.

`describe(cli)` is every command path (`cairn job list`) with its options and arguments: the
option strings, type (a choice's choices), default, whether it is required, repeatable, a flag,
its environment variable; arguments by position. `exit_codes()` is `cairn.errors.EXIT_CODES`
and each error's exit code, reply code and HTTP status. `json_outputs(cli)` is the JSON
Schema of what each command prints with `-o json`, from the type its `output_option(schema=)`
names (a command without one prints untyped, experimental JSON).

Help texts are not part of the surface: rewording a help text breaks no script. A command
whose help starts with `Experimental:` is recorded as experimental and is not held to the
baseline (docs/compatibility.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import msgspec

from cairn import errors
from cairn.cli.output import OutputOption
from tools._compat_rules import UNTYPED

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTAL_MARK = "Experimental:"


def _default(value: Any) -> Any:
    """A default as JSON that reads the same on every machine (a path under this checkout is
    written relative to it)."""
    if isinstance(value, list | tuple):
        return [_default(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        text = value if isinstance(value, str) else None
        if text is not None and text.startswith(str(REPO) + "/"):
            return "<checkout>/" + text[len(str(REPO)) + 1:]
        return value
    return _default(str(value))


def _type(info: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": info.get("name", "")}
    if "choices" in info:
        # Keys, not a list: a new choice is an addition, a removed one a break.
        out["choices"] = {str(c): True for c in info["choices"]}
    for bound in ("min", "max"):
        if info.get(bound) is not None:
            out[bound] = info[bound]
    return out


def _param(info: dict[str, Any], position: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": info["param_type_name"],
        "type": _type(info["type"]),
        "required": bool(info.get("required")),
        "nargs": info.get("nargs", 1),
        "multiple": bool(info.get("multiple")),
        "default": _default(info.get("default")),
    }
    if position is not None:
        out["position"] = position
    if info["param_type_name"] == "option":
        out["names"] = {name: True for name in [*info["opts"], *info["secondary_opts"]]}
        out["flag"] = bool(info.get("is_flag"))
        out["count"] = bool(info.get("count"))
        if info.get("envvar"):
            out["envvar"] = info["envvar"]
    return out


def _key(info: dict[str, Any], position: int) -> str:
    """How a parameter is known to a user: its first long option, or its position."""
    if info["param_type_name"] == "argument":
        return f"argument {position}"
    longs = [o for o in info["opts"] if o.startswith("--")]
    return str((longs or info["opts"])[0])


def _params(cmd: click.Command, ctx: click.Context) -> dict[str, Any]:
    out = {}
    position = 0
    for param in cmd.get_params(ctx):
        hidden = isinstance(param, click.Option) and param.hidden
        if hidden or "--help" in param.opts:
            continue
        info = param.to_info_dict()
        is_arg = info["param_type_name"] == "argument"
        position += is_arg
        out[_key(info, position)] = _param(info, position if is_arg else None)
    return out


def _commands(group: click.Command, path: list[str], parent: click.Context | None,
              out: dict[str, Any], experimental: bool = False) -> None:
    ctx = click.Context(group, info_name=path[-1], parent=parent)
    experimental = experimental or (group.help or "").lstrip().startswith(EXPERIMENTAL_MARK)
    entry: dict[str, Any] = {"params": _params(group, ctx)}
    if experimental:
        entry["experimental"] = True
    if isinstance(group, click.Group):
        entry["group"] = True
    else:
        output = _output_option(group, ctx)
        entry["json_output"] = UNTYPED if output is None or output.schema is None else "typed"
    out[" ".join(path)] = entry
    if isinstance(group, click.Group):
        for name in group.list_commands(ctx):
            child = group.get_command(ctx, name)
            if child is not None and not child.hidden:
                _commands(child, [*path, name], ctx, out, experimental)


def _output_option(cmd: click.Command, ctx: click.Context) -> OutputOption | None:
    for param in cmd.get_params(ctx):
        if isinstance(param, OutputOption):
            return param
    return None


def exit_codes() -> dict[str, Any]:
    """The exit code table and, per error type, its exit code, reply code and HTTP status."""
    errors_by_name: dict[str, Any] = {}
    for cls in [errors.CairnError, *_subclasses(errors.CairnError)]:
        if cls.__module__ == errors.__name__:
            errors_by_name[cls.__name__] = {"exit_code": cls.exit_code, "code": cls.code,
                                            "http_status": cls.http_status}
    return {
        "exit_codes": {str(code): {"error": error} for code, _, error in errors.EXIT_CODES},
        "usage_exit": errors.USAGE_EXIT,
        "interrupted_exit": errors.INTERRUPTED_EXIT,
        "errors": errors_by_name,
    }


def _subclasses(cls: type[Any]) -> list[type[Any]]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return sorted(set(found), key=lambda c: c.__name__)


def describe(cli: click.Group) -> dict[str, Any]:
    """The CLI surface: every command and its parameters, and the exit codes."""
    commands: dict[str, Any] = {}
    _commands(cli, ["cairn"], None, commands)
    return {"commands": dict(sorted(commands.items())), **exit_codes()}


def json_outputs(cli: click.Group) -> dict[str, Any]:
    """The JSON Schema of `-o json` of every command that names its output type."""
    out: dict[str, Any] = {}

    def walk(cmd: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(cmd, info_name=path[-1], parent=parent)
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                child = cmd.get_command(ctx, name)
                if child is not None and not child.hidden:
                    walk(child, [*path, name], ctx)
            return
        option = _output_option(cmd, ctx)
        if option is not None and option.schema is not None:
            try:
                out[" ".join(path)] = msgspec.json.schema(option.schema)
            except TypeError as exc:
                raise ValueError(f"{' '.join(path)}: output_option(schema={option.schema!r}) "
                                 f"has no JSON Schema: {exc}") from None

    walk(cli, ["cairn"], None)
    return dict(sorted(out.items()))
