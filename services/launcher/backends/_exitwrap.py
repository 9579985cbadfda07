"""Run one worker command and record how it ended, so a restarted launcher can tell.

The process backend starts this file (by path, with `python -I -S`: standard library only,
so it starts fast and a study's PYTHONPATH cannot change it) as the leader of a new session.
It then:

1. changes to the working directory and pins CPUs (the child inherits both);
2. starts the real command; in the child, before exec, it joins the worker's cgroup or sets
   RLIMIT_AS, so the wrapper itself stays outside the memory limit and survives an OOM kill
   of the worker to write the record;
3. ignores SIGTERM/SIGINT/SIGHUP for itself: the launcher signals the whole process group,
   so the worker gets the signal directly, and the wrapper must outlive it to write the record
   (a SIGKILL to the group ends the wrapper too; the launcher then knows it cancelled);
4. writes `exit.json` = {code, signal, error} atomically, and exits with the worker's code
   (or 128 + signal), so a launcher that is still its parent sees the same result.

Usage: python -I -S _exitwrap.py '<json config>'  (config: see `main`).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

# Exit status when the command could not be started, as shells use for "not found".
SPAWN_FAILED = 127


def write_record(path: str, record: dict[str, Any]) -> None:
    """Write the exit record atomically: a reader never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def confine(cgroup_procs: str | None, rlimit_as: int | None) -> Callable[[], None]:
    """The child's pre-exec step: join the cgroup or cap its address space."""

    def step() -> None:
        try:
            if cgroup_procs:
                with open(cgroup_procs, "w", encoding="ascii") as fh:
                    fh.write(str(os.getpid()))
            if rlimit_as:
                resource.setrlimit(resource.RLIMIT_AS, (rlimit_as, rlimit_as))
        except OSError as exc:
            # subprocess reports only "Exception occurred in preexec_fn"; say what, in the log.
            os.write(2, f"cairn: cannot apply the memory limit: {exc}\n".encode())
            raise

    return step


def main(argv: list[str]) -> int:
    """Config keys: argv, cwd, exit_path, cpus (list or empty), cgroup_procs, rlimit_as."""
    config = json.loads(argv[1])
    exit_path: str = config["exit_path"]
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # A Python-level handler, not SIG_IGN: handlers reset to default on exec, so the
        # worker still dies of SIGTERM unless it chooses otherwise.
        signal.signal(signum, lambda *_: None)
    try:
        os.chdir(config["cwd"])
        if config.get("cpus"):
            os.sched_setaffinity(0, config["cpus"])
        child = subprocess.Popen(
            config["argv"],
            stdin=subprocess.DEVNULL,
            preexec_fn=confine(config.get("cgroup_procs"), config.get("rlimit_as")),
        )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        message = f"cannot start {config['argv'][0]!r}: {exc}"
        print(f"cairn: {message}", file=sys.stderr, flush=True)
        write_record(exit_path, {"code": None, "signal": None, "error": message})
        return SPAWN_FAILED
    returncode = child.wait()  # EINTR from our no-op handlers is retried (PEP 475)
    if returncode < 0:
        write_record(exit_path, {"code": None, "signal": -returncode, "error": None})
        return 128 - returncode
    write_record(exit_path, {"code": returncode, "signal": None, "error": None})
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
