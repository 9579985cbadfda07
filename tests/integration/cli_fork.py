"""Run many `cairn` command lines fast: one interpreter imports the CLI once, and each
command line runs in a fork of it (what `python -m cairn` runs, minus the interpreter's start),
in its own folder, environment, address-space limit and time limit.

    results = run_forked([ForkedCommand(argv=[...], cwd=dir)], parallel=3)
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

DRIVER = r'''
import json, os, resource, signal, sys, time, traceback
import click
from cairn.cli import main as cli_main
for name in PRELOAD:
    cli_main.cli.get_command(click.Context(cli_main.cli), name)  # import each command once
cases = json.load(sys.stdin)

def child(case):
    resource.setrlimit(resource.RLIMIT_AS, (case["address_space"], case["address_space"]))
    os.chdir(case["cwd"])
    os.environ.clear()
    os.environ.update(case["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, case["stdout"]), (2, case["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    code = 0
    try:
        cli_main.main(case["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(code)

results = [None] * len(cases)
running = {}
queue = list(enumerate(cases))
while queue or running:
    while queue and len(running) < PARALLEL:
        index, case = queue.pop(0)
        pid = os.fork()
        if pid == 0:
            child(case)
        running[pid] = (index, time.monotonic())
    pid, status = os.waitpid(-1, os.WNOHANG)
    if pid == 0:
        for other, (index, started) in list(running.items()):
            if time.monotonic() - started > cases[index]["time_limit_s"]:
                os.kill(other, signal.SIGKILL)
                results[index] = {"code": None, "seconds": time.monotonic() - started}
        time.sleep(0.005)
        continue
    index, started = running.pop(pid)
    if results[index] is None:
        code = os.waitstatus_to_exitcode(status)
        results[index] = {"code": code, "seconds": time.monotonic() - started}
json.dump(results, sys.stdout)
'''


@dataclass
class ForkedCommand:
    argv: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    address_space: int = 768 * 1024 * 1024
    time_limit_s: float = 60.0


@dataclass
class ForkedResult:
    code: int | None
    """The exit code; None when it ran past its time limit (and was killed)."""
    stdout: str
    stderr: str
    seconds: float


def run_forked(commands: list[ForkedCommand], *, parallel: int = 2,
               preload: tuple[str, ...] = ()) -> list[ForkedResult]:
    """Run each command line as `cairn ARGV` in a fork of one prepared interpreter."""
    cases = []
    for n, command in enumerate(commands):
        case = asdict(command)
        case["cwd"] = str(command.cwd)
        case["stdout"] = str(command.cwd / f".forked-{n}.out")
        case["stderr"] = str(command.cwd / f".forked-{n}.err")
        cases.append(case)
    source = f"PRELOAD = {preload!r}\nPARALLEL = {parallel}\n" + DRIVER
    bound = max(c.time_limit_s for c in commands) * (len(commands) / parallel + 1) + 60
    done = subprocess.run([sys.executable, "-c", source], input=json.dumps(cases),
                          capture_output=True, text=True, timeout=bound, check=True)
    out = []
    for case, result in zip(cases, json.loads(done.stdout), strict=True):
        out.append(ForkedResult(code=result["code"],
                                stdout=Path(case["stdout"]).read_text(errors="replace"),
                                stderr=Path(case["stderr"]).read_text(errors="replace"),
                                seconds=result["seconds"]))
    return out
