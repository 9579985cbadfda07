"""Run one worker command and record how it ended, so a restarted launcher can tell.

The process backend starts this file (by path, with `python -I -S`: standard library only,
so it starts fast and a study's PYTHONPATH cannot change it) as the leader of a new session.
It then:

1. changes to the working directory and pins CPUs (the child inherits both);
2. forks and execs the real command; in the child, before exec, it joins the worker's cgroup
   or sets RLIMIT_AS, so the wrapper itself stays outside the memory limit and survives an
   OOM kill of the worker to write the record; it takes the worker's uid, where it has one;
   it then proves the allocation
   (`cairn.worker.allocation`: a worker that can use more or fewer GPUs than it asked for
   exits 78 before its program runs; the SDK checks again, with NVML);
3. blocks SIGTERM/SIGINT/SIGHUP for itself (the process backend starts it with them blocked
   already): the launcher signals the whole process group, so the worker gets the signal
   directly, and the wrapper must outlive it to write the record. The worker unblocks them
   only once their default action is back, so a signal sent while it starts is not lost;
   (a SIGKILL to the group ends the wrapper too; the launcher then knows it cancelled);
4. writes `exit.json` = {code, signal, error} atomically, and exits with the worker's code
   (or 128 + signal), so a launcher that is still its parent sees the same result.

It sits on every launch's path, so it imports almost nothing: no json (its `re` import costs
more than the rest of the wrapper), no subprocess (fork, exec and waitpid are enough).

In a sandboxed launch (`_sandbox.py`) this wrapper runs inside the sandbox, as its first
process after bwrap's own init, so it sees the worker exactly as the worker sees itself; with
a worker uid it keeps just CAP_SETUID and CAP_SETGID, and the worker takes its uid in step 2.
A worker's folders are its own, so the record is written with no link followed and into a
file only the wrapper creates (`write_record`).

Usage: python -I -S _exitwrap.py EXIT_PATH CWD CPUS CGROUP_PROCS RLIMIT_AS UID -- ARGV...
(CPUS a comma list or "-", CGROUP_PROCS a path or "-", RLIMIT_AS bytes or "-", UID the worker
uid or "-" for the wrapper's own). `_exitwrap.py --probe UID PYTHON`: take UID and start
PYTHON, as a worker would (the launcher's check that a worker can start here).
"""

import os
import resource
import signal
import sys
from collections.abc import Callable

# Exit status when the command could not be started, as shells use for "not found".
SPAWN_FAILED = 127
# What the launcher sends a worker's process group; the wrapper outlives them.
GROUP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _json_str(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def write_record(path: str, code: int | None, signum: int | None, error: str | None) -> None:
    """Write the exit record atomically: a reader never sees half a file.

    No fsync: the record must outlive the launcher, not the machine (a machine that goes
    down takes its workers with it).
    """
    def num(value: int | None) -> str:
        return "null" if value is None else str(value)

    body = (f'{{"code": {num(code)}, "signal": {num(signum)}, '
            f'"error": {"null" if error is None else _json_str(error)}}}')
    try:
        _store(path, body)
    except OSError as exc:
        # The worker made its folder unfit for the record (its `.cairn` is a link now, say):
        # the launcher goes by the exit status alone, and the log says why.
        print(f"cairn: cannot write the exit record {path}: {exc}", file=sys.stderr,
              flush=True)


def _store(path: str, body: str) -> None:
    folder, name = os.path.split(path)
    # The worker owns its working directory: no link in `.cairn` or in the file's place is
    # followed, and the temporary file is one this wrapper made (O_EXCL).
    top = os.open(os.path.dirname(folder), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        here = os.open(os.path.basename(folder), _DIR_FLAGS, dir_fd=top)
    finally:
        os.close(top)
    try:
        tmp = f"{name}.tmp"
        for _ in range(3):
            try:
                fd = os.open(tmp, _NEW_FILE, 0o644, dir_fd=here)
                break
            except FileExistsError:
                os.unlink(tmp, dir_fd=here)
        else:
            raise OSError(f"cannot create {tmp} in {folder}")
        try:
            os.write(fd, body.encode("utf-8"))
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=here, dst_dir_fd=here)
    finally:
        os.close(here)


def confine(cgroup_procs: str | None, rlimit_as: int | None, uid: int | None = None,
            interrupt: signal.Handlers | object = signal.SIG_DFL,
            drop: Callable[[], None] | None = None) -> None:
    """In the worker, before its program runs: join its cgroup or cap its address space, take
    its uid (or, without one, call `drop` to shed privileges), and let the group's signals act
    again (SIGINT through `interrupt`); one that arrived while it started is delivered now."""
    if cgroup_procs:
        with open(cgroup_procs, "w", encoding="ascii") as fh:
            fh.write(str(os.getpid()))
    if rlimit_as:
        resource.setrlimit(resource.RLIMIT_AS, (rlimit_as, rlimit_as))
    if uid is not None:
        become(uid)
    elif drop is not None:
        drop()
    if "CAIRN_ALLOCATION" in os.environ:
        prove_allocation()  # with its limits in place, before anything of the job runs
    for signum in GROUP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, interrupt)  # type: ignore[arg-type]
    signal.pthread_sigmask(signal.SIG_UNBLOCK, GROUP_SIGNALS)


def become(uid: int) -> None:
    """Take the worker's uid (and the same gid, no other groups): every capability goes with
    root's uid. Then no_new_privs, where the sandbox has not set it already, so no set-uid
    program gives anything back."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    with open("/proc/self/status", encoding="ascii") as fh:
        unset = "NoNewPrivs:\t0\n" in fh.read()
    if unset:
        import ctypes  # only off the sandbox: bwrap set it for us

        if ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "cannot set no_new_privs")


def _child(argv: list[str], cgroup_procs: str | None, rlimit_as: int | None,
           uid: int | None, report: int) -> None:
    """In the forked child: confine, exec; on failure tell the parent why and exit."""
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        confine(cgroup_procs, rlimit_as, uid)
        os.execvp(argv[0], argv)
    except BaseException as exc:  # noqa: BLE001 - anything here means "could not start"
        try:
            os.write(report, f"{type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(SPAWN_FAILED)


def prove_allocation() -> None:
    """In the worker, before its program: compare what it can see with `CAIRN_ALLOCATION`,
    and exit with `cairn.worker.allocation.MISMATCH_EXIT` on a GPU mismatch. That module is
    loaded by path (this wrapper runs with -I -S and cannot import cairn); NVML is left to
    the SDK, which checks again in a Python worker with the GPUs' UUIDs."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "worker", "allocation.py")
    spec = importlib.util.spec_from_file_location("_cairn_allocation", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no allocation check at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["_cairn_allocation"] = module
    spec.loader.exec_module(module)
    module.prove_allocation(nvml=False)


def prepare(cwd: str, cpus: str) -> tuple[int, int]:
    """In the wrapper: outlive the group's signals, move to the working directory, pin CPUs.

    Returns the pipe on which the worker reports a failure to start (read end, write end).
    """
    # Blocked, not ignored: the worker inherits the mask and unblocks them after restoring
    # their default action (an ignored signal would stay ignored across exec).
    signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
    os.chdir(cwd)
    if cpus != "-":
        os.sched_setaffinity(0, [int(c) for c in cpus.split(",")])
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, False)  # closed by a successful exec
    return read_end, write_end


def stopped_before_start(exit_path: str) -> int | None:
    """In the wrapper, just before the fork: a group signal already here (blocked) would not
    reach a worker forked now, so the worker is not started: record that it died of it and
    return the exit status; None to go on."""
    pending = sorted(set(signal.sigpending()) & set(GROUP_SIGNALS))
    if not pending:
        return None
    write_record(exit_path, None, int(pending[0]), None)
    return 128 + int(pending[0])


def supervise(pid: int, read_end: int, exit_path: str, program: str) -> int:
    """In the wrapper, after the fork: wait for the worker, write its record, return the
    wrapper's exit status (the worker's code, 128 + signal, or 127 if it never started)."""
    for signum in set(signal.sigpending()) & set(GROUP_SIGNALS):
        # Came between the check before the fork and the fork itself: pass it on.
        os.kill(pid, signum)
    failure = b""
    while chunk := os.read(read_end, 4096):  # empty at once when the exec succeeded
        failure += chunk
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if failure:
        message = f"cannot start {program!r}: {failure.decode(errors='replace')}"
        print(f"cairn: {message}", file=sys.stderr, flush=True)
        write_record(exit_path, None, None, message)
        return SPAWN_FAILED
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        write_record(exit_path, None, -code, None)
        return 128 - code
    write_record(exit_path, code, None, None)
    return code


def probe(uid: str, python: str) -> None:
    """`--probe`: take `uid` (unless "-") and become `python` doing nothing."""
    if uid != "-":
        become(int(uid))
    os.stat(os.getcwd())  # the worker's folder is reachable under that uid
    os.execv(python, [python, "-I", "-S", "-c", ""])


def main(args: list[str]) -> int:
    if len(args) == 4 and args[1] == "--probe":
        probe(args[2], args[3])
    exit_path, cwd, cpus, cgroup_procs, rlimit_as, uid = args[1:7]
    argv = args[8:] if len(args) > 7 and args[7] == "--" else []
    try:
        if not argv:
            raise ValueError("no command given")
        read_end, write_end = prepare(cwd, cpus)
        stopped = stopped_before_start(exit_path)
        if stopped is not None:
            return stopped
        pid = os.fork()
    except (OSError, ValueError) as exc:
        message = f"cannot start {argv[0] if argv else '(nothing)'!r}: {exc}"
        print(f"cairn: {message}", file=sys.stderr, flush=True)
        write_record(exit_path, None, None, message)
        return SPAWN_FAILED
    if pid == 0:
        os.close(read_end)
        _child(argv, None if cgroup_procs == "-" else cgroup_procs,
               None if rlimit_as == "-" else int(rlimit_as),
               None if uid == "-" else int(uid), write_end)
    os.close(write_end)
    return supervise(pid, read_end, exit_path, argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
