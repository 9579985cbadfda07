"""The launcher's side of the warm interpreter (`_zygote.py`): start it, ask it for workers.

A launch goes to the zygote only when a fresh interpreter would run it the same way:

- the program is `python` from the launcher's own interpreter directory (the same venv);
- it is `python -m MODULE ...`, `python -c CODE ...` or `python SCRIPT ...` with SCRIPT a
  `.py` file, and no other interpreter flags;
- the environment sets no `PYTHON*` variable but `PYTHONPATH` and `PYTHONUNBUFFERED`
  (the others change how an interpreter starts);
- the memory limit is not `RLIMIT_AS` (it caps virtual size, and a forked worker maps
  everything the zygote imported, which a cold one might never import);
- no top-level module of the job (in its working directory or `PYTHONPATH`) has the name of
  one the zygote imported, which a fresh interpreter would have taken from the job instead.

Anything else, and any time the zygote is not ready or has died, the launch is exec'd as
before: warm workers are only ever faster, never different. `CAIRN_WARM_WORKERS=0` in the
launcher's environment turns them off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import weakref
from pathlib import Path
from typing import Any

from cairn.launcher.backends._memlimit import MemoryLimit
from cairn.launcher.backends._workdir import LOG_NAME, exit_path
from cairn.launcher.backends.errors import LaunchFailed
from cairn.runtime.forked import ZYGOTE_FD_ENV

log = logging.getLogger("cairn.launcher")

KEPT_PYTHON_VARS = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED"})
REPLY_TIMEOUT_S = 10.0
RESTART_AFTER_S = 30.0
# The zygote's imports cost about 0.3 CPU-s: started this long after the launcher, they do
# not slow a federation's start; a launch before then starts it at once.
START_DELAY_S = 1.0
_LEN = struct.Struct(">I")


_Key = tuple[str, tuple[tuple[str, str], ...]]
# Per event loop: a zygote's lock and timer belong to the loop it was made on.
_SHARED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_Key, tuple[Zygote, int]]] = (
    weakref.WeakKeyDictionary())


def shared_zygote(python: str, env: dict[str, str]) -> Zygote:
    """The zygote for this interpreter and environment on this event loop, made on first
    use (without a running loop, a zygote of its own).

    Several launchers in one process (`cairn.runtime.sites`: many simulated sites) share
    one warm interpreter instead of one each; a launch's own environment, working
    directory and limits travel with each request, so a shared one starts every worker as
    its own would. Give it back with `release_zygote`."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return Zygote(python, env)
    shared = _SHARED.setdefault(loop, {})
    key = (python, tuple(sorted(env.items())))
    zygote, users = shared.get(key) or (Zygote(python, env), 0)
    shared[key] = (zygote, users + 1)
    return zygote


async def release_zygote(zygote: Zygote) -> None:
    """One launcher less uses `zygote`; the last one closes it."""
    shared = _SHARED.get(asyncio.get_running_loop(), {})
    for key, (known, users) in list(shared.items()):
        if known is zygote:
            if users > 1:
                shared[key] = (known, users - 1)
                return
            del shared[key]
    await zygote.close()


def enabled_by_env() -> bool:
    return os.environ.get("CAIRN_WARM_WORKERS", "1").strip().lower() not in ("0", "false", "no")


def inherited_socket() -> socket.socket | None:
    """The socket to the zygote `cairn up` forked for this launcher, taken once (the
    variable is removed, so no child of ours sees it); None when there is none."""
    value = os.environ.pop(ZYGOTE_FD_ENV, "")
    if not value.isdigit():
        return None
    try:
        sock = socket.socket(fileno=int(value))
    except OSError as exc:
        log.warning("warm workers: %s=%s is no socket (%s); starting our own",
                    ZYGOTE_FD_ENV, value, exc)
        return None
    if sock.type != socket.SOCK_STREAM or sock.family != socket.AF_UNIX:
        sock.detach()
        return None
    return sock


def zygote_env(python: str, home: str) -> dict[str, str]:
    """The warm interpreter's own environment (each worker gets its own, per launch)."""
    from cairn.launcher.backends._env import host_start_env

    # The endpoint tells the zygote to preload the tracing SDK (see _zygote.py).
    return {**host_start_env(python, home=home),
            **{k: v for k in ("OTEL_EXPORTER_OTLP_ENDPOINT",) if (v := os.environ.get(k))}}


class Zygote:
    """One warm interpreter per process backend: started by this launcher, or adopted from
    `cairn up` (`inherited`, see `ZYGOTE_FD_ENV`)."""

    def __init__(self, python: str, env: dict[str, str],
                 inherited: socket.socket | None = None) -> None:
        self.python = python
        self.env = env
        self.modules: frozenset[str] = frozenset()
        self.ready = False
        self.forked = 0
        """Workers started warm so far."""
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._buf = b""
        self._lock = asyncio.Lock()
        self._died_at: float | None = None
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._adopted = inherited is not None
        if inherited is not None:
            inherited.setblocking(False)
            self._sock = inherited
            return
        with contextlib.suppress(RuntimeError):  # no loop yet: the first launch starts it
            self._timer = asyncio.get_running_loop().call_later(START_DELAY_S, self._start_once)

    def health(self) -> dict[str, object]:
        return {"pid": self.pid, "ready": self.ready, "forked": self.forked,
                "adopted": self._adopted}

    # -- lifecycle ------------------------------------------------------------------------

    def _start_once(self) -> None:
        if self._sock is None and self._died_at is None and not self._closed:
            self._start()

    def _start(self) -> None:
        self._adopted = False
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                # -u: worker logs unbuffered, as with the PYTHONUNBUFFERED a fresh worker gets
                # (no flag that sys.flags shows: workers inherit those).
                [self.python, "-u", "-m", "cairn.launcher.backends._zygote",
                 str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, env=self.env, start_new_session=True)
        except OSError as exc:
            log.warning("warm workers off: cannot start the zygote: %s", exc)
            ours.close()
            self._died_at = time.monotonic()
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock, self._buf, self.ready = ours, b"", False
        self.pid = self._proc.pid

    def _died(self, why: str) -> None:
        log.warning("warm workers: the zygote is gone (%s); launching cold meanwhile", why)
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()  # hung, or half gone: it is not asked again
        elif self._proc is None and self.pid is not None:
            with contextlib.suppress(OSError):  # adopted: `cairn up` reaps it
                os.kill(self.pid, signal.SIGKILL)
        self._reap()
        self._died_at = time.monotonic()

    def _reap(self) -> None:
        """Hang up and wait for the zygote to leave (it exits on end of file)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.ready = False
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            if self._proc.returncode is None:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    async def close(self) -> None:
        """Hang up: the zygote exits; workers it started keep running."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        await asyncio.to_thread(self._reap)

    async def _available(self) -> bool:
        """Ready to fork workers, waiting for it if it is still importing (that is never
        slower than a cold start, which would import the same)."""
        if self._closed:
            return False
        if self._proc is not None and self._proc.poll() is not None:
            self._died(f"exit status {self._proc.returncode}")
        if self._sock is None:
            if self._died_at is None or time.monotonic() - self._died_at > RESTART_AFTER_S:
                self._died_at = None
                self._start()  # first use, or a restart after it died
            if self._sock is None:
                return False
        if self.ready:
            return True
        try:
            hello = await asyncio.wait_for(self._read(), REPLY_TIMEOUT_S)
        except (OSError, TimeoutError, EOFError) as exc:
            self._died(f"while starting: {exc or type(exc).__name__}")
            return False
        self.modules = frozenset(hello.get("modules", ()))
        if self._proc is None and isinstance(hello.get("pid"), int):
            self.pid = hello["pid"]
        self.ready = True
        return True

    def _take(self) -> dict[str, Any] | None:
        if len(self._buf) < _LEN.size:
            return None
        size = _LEN.unpack_from(self._buf)[0]
        if len(self._buf) < _LEN.size + size:
            return None
        body = self._buf[_LEN.size : _LEN.size + size]
        self._buf = self._buf[_LEN.size + size :]
        return dict(json.loads(body))

    # -- launching ------------------------------------------------------------------------

    def eligible(self, argv: list[str], env: dict[str, str], cwd: Path) -> bool:
        """Would a fresh interpreter run this launch exactly as the zygote would?"""
        return self.plain_python(argv, env, cwd) and not self.shadowed(env, cwd)

    def plain_python(self, argv: list[str], env: dict[str, str], cwd: Path) -> bool:
        """`python -m MODULE`, `-c CODE` or `SCRIPT` of our interpreter, with no other flags."""
        if len(argv) < 2 or any(k.startswith("PYTHON") and k not in KEPT_PYTHON_VARS
                                for k in env):
            return False
        program = str(cwd / argv[0]) if os.sep in argv[0] else shutil.which(
            argv[0], path=env.get("PATH", ""))
        if program is None or os.path.dirname(os.path.abspath(program)) != os.path.dirname(
                os.path.abspath(self.python)):
            return False
        with contextlib.suppress(OSError):
            if not os.path.samefile(program, self.python):
                return False
        if argv[1] in ("-m", "-c"):
            if len(argv) < 3 or (argv[1] == "-m" and argv[2].startswith("-")):
                return False
        elif not argv[1].endswith(".py") or not (cwd / argv[1]).is_file():
            return False  # a flag, or a folder or zip app with a __main__
        return True

    def shadowed(self, env: dict[str, str], cwd: Path) -> bool:
        """Does the job bring a module the zygote already imported (a fresh interpreter
        would import the job's)?"""
        roots = [cwd] + [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        return bool(_top_level_names(roots) & self.modules)

    async def spawn(self, argv: list[str], env: dict[str, str], workdir: Path,
                    cpus: list[int], limit: MemoryLimit, *, uid: int | None = None,
                    sandbox: list[str] | None = None,
                    holder: str = "cat") -> tuple[int, int] | None:
        """Start the worker from the zygote: (session leader pid, its start ticks), or None
        when this launch must be exec'd instead. With `sandbox` (bwrap and its options), in
        that sandbox, which `holder` keeps open (see `_nsjoin`); with `uid`, under it."""
        request = {
            "exit_path": str(exit_path(workdir)), "cwd": str(workdir),
            "cpus": ",".join(str(c) for c in cpus) or "-",
            "cgroup_procs": limit.cgroup_procs or "-",
            "rlimit_as": str(limit.rlimit_as) if limit.rlimit_as else "-",
            "uid": "-" if uid is None else str(uid), "sandbox": sandbox, "holder": holder,
            "log_path": str(workdir / LOG_NAME), "argv": argv, "env": env,
        }
        if limit.rlimit_as or not self.plain_python(argv, env, workdir):
            # RLIMIT_AS caps virtual size, and a forked worker maps what the zygote imported.
            return None
        async with self._lock:
            # Shadowing needs the zygote's module names, so readiness comes first.
            if not await self._available() or self.shadowed(env, workdir):
                return None
            assert self._sock is not None
            data = json.dumps(request).encode()
            try:
                await asyncio.get_running_loop().sock_sendall(
                    self._sock, _LEN.pack(len(data)) + data)
            except OSError as exc:
                self._died(str(exc))
                return None  # it never got the request: start this one cold
            try:
                reply = await asyncio.wait_for(self._read(), REPLY_TIMEOUT_S)
            except (OSError, TimeoutError, EOFError) as exc:
                # It may have forked the wrapper already: starting the worker cold as well
                # could run it twice, so this launch fails instead (and may be retried).
                self._died(str(exc) or type(exc).__name__)
                raise LaunchFailed("the warm interpreter did not answer while starting the "
                                   f"worker ({exc or type(exc).__name__})") from exc
        if "error" in reply:
            # Whatever stopped the wrapper would stop an exec'd one too: say so.
            raise LaunchFailed(f"cannot start the worker: {reply['error']}")
        self.forked += 1
        return int(reply["pid"]), int(reply["start_ticks"])

    async def _read(self) -> dict[str, Any]:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        while (message := self._take()) is None:
            chunk = await loop.sock_recv(self._sock, 1 << 16)
            if not chunk:
                raise EOFError("the zygote hung up")
            self._buf += chunk
        return message


def _top_level_names(roots: list[Path]) -> set[str]:
    """Module and package names importable from the top of these folders."""
    names: set[str] = set()
    for root in roots:
        with contextlib.suppress(OSError):
            for entry in os.scandir(root):
                name, dot, _ = entry.name.partition(".")
                if (entry.is_dir() and not dot) or entry.name.endswith((".py", ".pyc", ".so")):
                    names.add(name)
    return names
