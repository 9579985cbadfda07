"""A warm interpreter that starts Python workers with Cairn's worker SDK already imported.

A fresh `python -m app` spends about 0.3 CPU-s importing asyncio, nats and the worker SDK
before the first line of the job runs; three workers starting at once on a small machine
wait on each other for a second. The process backend therefore keeps one of these per site
(see `_warm.py`): it imports the SDK once, then, per launch, forks a wrapper that does what
`_exitwrap.py` does (new session, working directory, CPUs, exit record), which forks the
worker. The worker joins its cgroup or takes its address-space limit, takes the launch's
environment, argv and sys.path, and runs the module or script as `python` would.

Only Cairn's own modules and their dependencies are preloaded, never a job's (numpy reads
its thread settings when it is imported, which must happen under the worker's environment
and CPU affinity). `_warm.py` sends only launches that a fresh interpreter would run the
same way; everything else is exec'd as before.

A sandboxed launch gets the sandbox a cold one would (`_nsjoin.py`): the forked session
leader starts bwrap with the worker's view and joins its pid namespace; the wrapper it forks
there joins the rest and carries on as `_exitwrap` inside; the worker takes its uid (or, with
none, gives up root's capabilities) before any job code runs.

Protocol on the socket passed as argv[1] (each message a 4-byte big-endian length and JSON):
the zygote first sends {"ready": true, "modules": [top-level names it imported]}; then per
request {"exit_path", "cwd", "cpus", "cgroup_procs", "rlimit_as", "uid", "sandbox",
"log_path", "argv", "env"} (uid "-" or a number; sandbox null or bwrap with its options) it
answers {"pid", "start_ticks"} or {"error"}. End of file on the socket ends the zygote;
its wrappers live on (the launcher finds them again by pid and exit record).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.machinery
import io
import json
import os
import runpy
import signal
import socket
import struct
import sys
import types
from typing import Any

from cairn.launcher.backends import _exitwrap, _nsjoin, _proc

PRELOAD = ("cairn.worker", "cairn.worker.rounds",
           # imported when the worker connects (credentials, TLS, the host name's encoding,
           # the resolver's thread pool), not by the modules above
           "cairn.trust.connect", "cairn.runtime.context", "encodings.idna",
           "concurrent.futures.thread")
# What `cairn.telemetry.setup` imports: preloaded only where the launcher traces (it gives
# the zygote OTEL_EXPORTER_OTLP_ENDPOINT), so a traced worker does not spend ~0.1 CPU-s on
# them at its start, and tracing off still costs nothing.
TRACING_PRELOAD = ("opentelemetry.sdk.resources", "opentelemetry.sdk.trace",
                   "opentelemetry.sdk.trace.export",
                   "opentelemetry.trace.propagation.tracecontext",
                   # a process-backend worker spools its spans (cairn.tracespool): it needs
                   # the OTLP encoder, not the HTTP exporter
                   "opentelemetry.exporter.otlp.proto.common.trace_encoder",
                   "cairn.tracespool", "cairn._traceexport")
_LEN = struct.Struct(">I")


def send_msg(sock: socket.socket, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError:  # the launcher went with our hello unread: a hang-up
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_msg(sock: socket.socket) -> dict[str, Any] | None:
    head = _recv_exact(sock, _LEN.size)
    if head is None:
        return None
    body = _recv_exact(sock, _LEN.unpack(head)[0])
    return None if body is None else dict(json.loads(body))


def serve(sock: socket.socket) -> dict[str, Any] | None:
    """The zygote's loop. Returns None when the launcher hangs up; returns a launch request
    only in a forked worker, which then runs it (see `run`)."""
    # Wrappers are reaped by the kernel: the launcher learns their end from the exit record.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while (req := recv_msg(sock)) is not None:
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(read_end)
            os.close(write_end)
            send_msg(sock, {"error": f"fork failed: {exc}"})
            continue
        if pid == 0:
            os.close(read_end)
            sock.close()
            return _wrapper(req, write_end)
        os.close(write_end)
        reply = b""
        while chunk := os.read(read_end, 64):
            reply += chunk
        os.close(read_end)
        if reply.isdigit():
            send_msg(sock, {"pid": pid, "start_ticks": int(reply)})
        else:
            send_msg(sock, {"error": reply.decode(errors="replace") or "wrapper died"})
    return None


def _wrapper(req: dict[str, Any], ready: int) -> dict[str, Any]:
    """In the forked wrapper: become `_exitwrap` for this launch, fork the worker.

    Returns (in the worker only) the request to run; the wrapper itself ends in `os._exit`.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # so waitpid sees the worker
    # Before there is a group to signal: the wrapper outlives the group's signals.
    signal.pthread_sigmask(signal.SIG_BLOCK, _exitwrap.GROUP_SIGNALS)
    try:
        os.setsid()
        ticks = _proc.start_ticks(os.getpid())
        if ticks is None:
            raise OSError("no /proc entry of its own")
        # Before the launcher hears of us: once it has the pid, the log is there to read.
        log = os.open(req["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
    except OSError as exc:
        os.write(ready, f"cannot start a session: {exc}".encode())
        os._exit(_exitwrap.SPAWN_FAILED)
    # In its own session, so the launcher may signal the group: say who we are at once (the
    # zygote waits for this). From here on, a failure is told by the exit record.
    os.write(ready, str(ticks).encode())
    os.close(ready)
    exit_path = req["exit_path"]
    try:
        if req.get("sandbox"):
            _enter_sandbox(req)
        read_end, write_end = _exitwrap.prepare(req["cwd"], req["cpus"])
        stopped = _exitwrap.stopped_before_start(exit_path)
        if stopped is not None:
            os._exit(stopped)
        pid = os.fork()
    except OSError as exc:
        message = f"cannot start {req['argv'][0]!r}: {exc}"
        print(f"cairn: {message}", file=sys.stderr, flush=True)
        _exitwrap.write_record(exit_path, None, None, message)
        os._exit(_exitwrap.SPAWN_FAILED)
    if pid == 0:
        os.close(read_end)
        try:
            _become_worker(req)
        except KeyboardInterrupt:
            os._exit(128 + signal.SIGINT)  # interrupted while starting, as `python` would be
        except BaseException as exc:  # noqa: BLE001 - anything here means "could not start"
            try:
                os.write(write_end, f"{type(exc).__name__}: {exc}".encode())
            finally:
                os._exit(_exitwrap.SPAWN_FAILED)
        os.close(write_end)
        return req
    os.close(write_end)
    if "userns_fd" in req:
        os.close(req["userns_fd"])  # the worker's alone
    code = _exitwrap.supervise(pid, read_end, exit_path, req["argv"][0])
    os._exit(code & 0xFF)


def _enter_sandbox(req: dict[str, Any]) -> None:
    """In the session leader: start the worker's sandbox, fork the wrapper into it, and stay
    outside as what the launcher watches, ending with the wrapper's status. Returns only in
    the wrapper, which is then inside (see `_nsjoin`).

    Raises:
        OSError: the sandbox did not come up.
    """
    holder = _nsjoin.start_holder(req["sandbox"], req["holder"], {"PATH": "/usr/bin:/bin"})
    stopped = _exitwrap.stopped_before_start(req["exit_path"])
    if stopped is not None:
        os._exit(stopped)
    _nsjoin.join_pid_namespace(holder)
    pid = os.fork()
    if pid == 0:
        user = _nsjoin.join_view(holder)
        if user is not None:
            req["userns_fd"] = user  # the worker's to join, last
        return
    holder.close_namespaces()
    # A group signal that came just before the fork is ours alone: the wrapper must see it.
    for signum in set(signal.sigpending()) & set(_exitwrap.GROUP_SIGNALS):
        os.kill(pid, signum)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit((128 - code if code < 0 else code) & 0xFF)  # and the holder ends with us


def _become_worker(req: dict[str, Any]) -> None:
    """Everything a fresh `python` under `_exitwrap` would have, but the imports."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.clear()
    os.environ.update(req["env"])
    argv = req["argv"]
    if argv[1] == "-m":
        first, sys.argv = os.getcwd(), [argv[2], *argv[3:]]
    elif argv[1] == "-c":
        first, sys.argv = "", ["-c", *argv[3:]]
    else:
        first, sys.argv = os.path.dirname(os.path.abspath(argv[1])), argv[1:]
    extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *sys.path]
    from cairn import telemetry

    telemetry.reset_from_env()
    # Last: a signal that came while the worker started is delivered here, and ends it.
    cgroup, rlimit, uid = req["cgroup_procs"], req["rlimit_as"], req.get("uid", "-")
    _exitwrap.confine(None if cgroup == "-" else cgroup, None if rlimit == "-" else int(rlimit),
                      None if uid == "-" else int(uid), interrupt=signal.default_int_handler,
                      # Joined as the wrapper's user (root, or the user namespace's owner):
                      # keep none of its capabilities, as bwrap's own command keeps none.
                      drop=(lambda: _shed(req)) if req.get("sandbox") else None)


def _shed(req: dict[str, Any]) -> None:
    """A sandboxed warm worker without a uid of its own: into the sandbox's own user
    namespace where it has one, and no capability left."""
    if "userns_fd" in req:
        _nsjoin.join_user(req.pop("userns_fd"))
    _nsjoin.drop_privileges()


def run(req: dict[str, Any]) -> None:
    """In the worker: run its module, command or script as `__main__`, as `python` would."""
    argv = req["argv"]
    if argv[1] == "-m":
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    elif argv[1] == "-c":
        _run_as_main(compile(argv[2], "<string>", "exec"), None)
    else:
        path = os.path.abspath(argv[1])
        with open(path, "rb") as fh:
            source = fh.read()
        _run_as_main(compile(source, path, "exec"), path)


def _run_as_main(code: types.CodeType, path: str | None) -> None:
    """Run code in a fresh `__main__`, as `python -c` and `python SCRIPT` do."""
    main = types.ModuleType("__main__")
    if path is not None:
        main.__file__ = path
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    sys.modules["__main__"] = main
    exec(code, main.__dict__)  # noqa: S102 - this is what the interpreter does with them


def main() -> int:
    # `-m` put the launcher's working directory first on sys.path: not the workers' business.
    if sys.path and sys.path[0] == os.getcwd():
        del sys.path[0]
    req = _serve(socket.socket(fileno=int(sys.argv[1])))
    if req is not None:
        run(req)  # the interpreter's own exit follows, as after `python -m`
    return 0


def serve_forked(sock: socket.socket) -> int:
    """`main` in a zygote forked (`cairn.runtime.forked.fork_zygote`) from a process that has
    imported `PRELOAD` already and read no secret: made what `python -u -m` of this module
    would be, as far as a worker can tell (its path, unbuffered stdio, default signals)."""
    # Nothing the forking process had open but our socket (a fresh one inherits nothing
    # else); the objects that held them are kept from the collector first, so none is
    # finalized later and closes a number reused by then.
    gc.freeze()
    fd = sock.fileno()
    os.closerange(3, fd)
    os.closerange(fd + 1, max(fd + 2, os.sysconf("SC_OPEN_MAX")))
    _wipe_exec_environ()
    sys.path[:] = fresh_path(sys.path)
    sys.argv = [__file__, str(fd)]
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, f"__{name}__", None) or getattr(sys, name)
        setattr(sys, name, io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                                            encoding=old.encoding, errors=old.errors,
                                            write_through=True))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # From the environment at start, as a fresh interpreter reads it (`sys.flags` itself
    # keeps the forking interpreter's: see `forkable`).
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    # The forking process's exit handlers are not a worker's (logging's is, as a fresh
    # interpreter registers it on import).
    import atexit
    import logging

    atexit._clear()
    atexit.register(logging.shutdown)
    req = _serve(sock)
    if req is None:
        return 0
    # The worker: its frames sit on top of the forking process's, and must never return into
    # them. It ends as an interpreter would: SystemExit's code, a traceback and 1, the
    # threads joined and the exit handlers run, its output flushed.
    code = 0
    try:
        run(req)
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 - reported as `python` reports it
        sys.excepthook(*sys.exc_info())
        code = 1
    _finalize()
    if code < 0:  # as `python` does for an uncaught KeyboardInterrupt: die of the signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _finalize() -> None:
    """What the interpreter does on its way out that `os._exit` skips."""
    import atexit
    import threading

    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()


def _wipe_exec_environ() -> None:
    """Zero the environment block the forking process was exec'd with. `/proc/PID/environ`
    reads it from memory, so every worker forked from here would show `cairn up`'s whole
    environment there (a spawned zygote's holds only its own few variables). `os.environ`
    was replaced before (`cairn.runtime.forked.fork_main`), and the C `environ` no longer
    points into the block."""
    import ctypes

    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end: proc(5) 50, 51
    except (OSError, IndexError, ValueError):
        return
    if 0 < start < end:
        ctypes.memset(start, 0, end - start)


CHANGING_FLAGS = ("debug", "inspect", "interactive", "optimize", "no_user_site", "no_site",
                  "ignore_environment", "verbose", "bytes_warning", "isolated", "dev_mode",
                  "safe_path")
"""Interpreter flags that change how a worker's code runs: a process started with any of
them set forks no zygote (`forkable`), as its workers would run unlike cold ones."""


def forkable() -> bool:
    """Whether a zygote forked from this interpreter gives workers what `python -u -m`
    would: none of `CHANGING_FLAGS` set (`-B`'s is set right in the zygote)."""
    return not any(getattr(sys.flags, name, 0) for name in CHANGING_FLAGS)


def fresh_path(path: list[str]) -> list[str]:
    """`path` without what was put before the standard library (a script's folder, a
    program's own inserts): what a fresh `python -m` of an installed module starts from."""
    stdlib = {os.path.dirname(os.__file__),
              os.path.join(sys.base_prefix, "lib",
                           f"python{sys.version_info[0]}{sys.version_info[1]}.zip")}
    for i, entry in enumerate(path):
        if entry in stdlib:
            return path[i:]
    return list(path)


def preload_workers() -> None:
    """What a warm interpreter imports before its first worker. The rounds need numpy (the
    `demo` extra), which an install of Cairn alone lacks: a zygote without it is still a
    zygote, and a worker that needs it fails as it would cold."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _serve(sock: socket.socket) -> dict[str, Any] | None:
    """Preload, say ready, serve; the launch request in a forked worker, else None."""
    preload_workers()
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        for name in TRACING_PRELOAD:
            with contextlib.suppress(ImportError):  # a worker would fail the same way
                importlib.import_module(name)
    # Everything imported so far lives as long as any worker: out of the collector's sight, a
    # worker's own imports (numpy's, say) do not make every collection walk (and copy, page
    # by page) the zygote's objects. With the tracing SDK loaded that doubled numpy's import.
    gc.freeze()
    send_msg(sock, {"ready": True, "pid": os.getpid(),
                    "modules": sorted({m.partition(".")[0] for m in sys.modules})})
    return serve(sock)


if __name__ == "__main__":
    sys.exit(main())
