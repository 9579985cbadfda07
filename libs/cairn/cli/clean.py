"""`cairn clean`: remove a stopped embedded federation's state (`.cairn/`), as `nvflare poc
clean` does for its POC workspace.

It refuses while anything of that federation runs: the `cairn up` the context file names
(`up_pid`), or any process whose command line names the folder (the nats-server on its store,
the service parents on its site configs, workers in its sites' work folders), which a `cairn
up` killed with SIGKILL leaves behind. It removes only a folder that `cairn up` made (it holds
its federation.yaml or its nats store), and the context file that points at it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from cairn.cli.output import emit, output_option
from cairn.errors import Conflict, InvalidInput, NotFound
from cairn.runtime import context
from cairn.runtime.dirlock import pid_alive

MARKERS = ("federation.yaml", "nats")
"""What `cairn up --dir DIR` always creates in DIR: a folder with neither is not one."""


def running_pids(folder: Path) -> list[tuple[int, str]]:
    """Processes (pid, command line) that name `folder` on their command line or run in it."""
    root = str(folder.resolve())
    found = []
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            # Not ours to read, or not yet: a process in the middle of its exec refuses it
            # for a moment, and its command line alone may name the folder.
            cwd = ""
        line = " ".join(w.decode("utf-8", "replace") for w in words if w)
        if root in line or cwd == root or cwd.startswith(root + "/"):
            found.append((int(entry.name), line[:120]))
    return found


def _size(folder: Path) -> tuple[int, int]:
    files = size = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            files += 1
            size += path.stat().st_size
    return files, size


HELP = """Remove the state of a stopped embedded federation: DIR (default .cairn, as `cairn
up --dir`) with its NATS store, trust kits, keys, site folders and logs, and the
context file that points at it. `cairn up` starts afresh afterwards.

\b
Refused (exit 6) while the federation runs: its `cairn up`, or any process left
running from it (named, with its pid: stop it first, e.g. `cairn down`).
Exit codes: 0 removed; 3 DIR is not an embedded federation's folder; 4 no DIR;
6 something of it still runs.
"""


@click.command(help=HELP, short_help="Remove a stopped embedded federation's state.")
@click.option("--dir", "dir_", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".cairn"), show_default=True, help="The folder `cairn up` used.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@output_option()
def clean(dir_: Path, dry_run: bool, output: str) -> None:
    if not dir_.exists():
        raise NotFound(f"{dir_} does not exist: nothing to clean", file=str(dir_))
    if dir_.is_symlink() or not dir_.is_dir():
        raise InvalidInput("not a folder `cairn up` made (a link or a file): left alone",
                           file=str(dir_))
    if not any((dir_ / marker).exists() for marker in MARKERS):
        raise InvalidInput(f"not an embedded federation's folder (no {' or '.join(MARKERS)} "
                           "in it): left alone", file=str(dir_))
    path = context.context_path()
    ctx = context.load(path, required=False) if path.is_file() else None
    ours = ctx is not None and ctx.dir is not None and Path(ctx.dir).resolve() == dir_.resolve()
    if ours and ctx is not None and ctx.up_pid is not None and pid_alive(ctx.up_pid):
        raise Conflict(f"the federation runs: cairn up (pid {ctx.up_pid}, {ctx.nats_url}); "
                       "stop it first (`cairn down`)", file=str(dir_))
    left = running_pids(dir_)
    if left:
        listed = "; ".join(f"pid {pid}: {line}" for pid, line in left[:5])
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        raise Conflict(f"{len(left)} process(es) of this federation still run: {listed}{more};"
                       " stop them first (`cairn down`, or kill PID)", file=str(dir_))
    files, size = _size(dir_)
    removed = [str(dir_)] + ([str(path)] if ours and not path.resolve().is_relative_to(
        dir_.resolve()) else [])
    if not dry_run:
        shutil.rmtree(dir_)
        if ours:
            path.unlink(missing_ok=True)
    data = {"removed": removed, "files": files, "bytes": size, "dry_run": dry_run}
    verb = "would remove" if dry_run else "removed"
    emit(data, output, lambda d: click.echo(
        f"{verb} {', '.join(removed)} ({files} files, {size / 2**20:.1f} MiB)"))
