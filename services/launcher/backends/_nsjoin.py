"""How a warm (forked) worker gets into the same bubblewrap sandbox a cold one is exec'd in.

A forked process cannot exec bwrap without losing what the zygote preloaded, so the sandbox is
made by bwrap all the same and joined: the zygote's wrapper starts bwrap with the worker's
view (`_sandbox.Sandbox.argv`) running a *holder* (`cat`, reading a pipe only the wrapper
writes), learns the sandbox's pid from bwrap's `--info-fd`, waits for the holder's echo (the
view is complete once the holder runs), and joins its namespaces with setns(2):

- the wrapper joins the pid namespace (where not root, the user namespace that owns it
  first), so what it forks next lives inside, as a cold worker does;
- that child joins the mount and IPC namespaces: from here it sees exactly the cold view;
- where not root, the worker last joins the sandbox's own user namespace (bwrap nests one
  inside the owner, where the worker's uid is its own again), as a cold worker lives in it.

The holder lives as long as the wrapper holds the pipe: when the wrapper ends, `cat` ends,
the sandbox's init ends, and the kernel kills whatever the job left in its pid namespace.

A process that joined as root keeps its capabilities: the worker gives them up before any
job code runs (`drop_privileges`), and sets no_new_privs, as bwrap does for its command.
Standard library only (ctypes): the zygote imports it, the exit wrapper never does.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import select
from dataclasses import dataclass

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
_NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522
READY_TIMEOUT_S = 10.0

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(fd, nstype), "setns")


@dataclass
class Holder:
    """A started sandbox: bwrap's pid, the sandbox's namespaces, the pipe that keeps it."""

    pid: int
    namespaces: dict[str, int]
    keep: int

    def close_namespaces(self) -> None:
        for fd in self.namespaces.values():
            os.close(fd)
        self.namespaces = {}


def _read_until_eof(fd: int, deadline_s: float, limit: int = 65536) -> bytes:
    data = b""
    while len(data) < limit:
        ready, _, _ = select.select([fd], [], [], deadline_s)
        if not ready:
            raise OSError("the sandbox did not start in time")
        chunk = os.read(fd, 4096)
        if not chunk:
            return data
        data += chunk
    return data


def start_holder(view: list[str], holder: str, env: dict[str, str]) -> Holder:
    """Start bwrap (`view`: its program and options, no command) holding a sandbox open.

    Signals keep the caller's mask (the wrapper's group signals blocked): a cancel reaches the
    worker, never the holder. stderr is the caller's (the worker log).

    Raises:
        OSError: bwrap did not start or the sandbox did not come up (its reason is in the log).
    """
    info_r, info_w = os.pipe()
    feed_r, feed_w = os.pipe()
    echo_r, echo_w = os.pipe()
    try:
        pid = os.posix_spawn(view[0], [*view, "--info-fd", "3", "--", holder], env,
                             file_actions=[(os.POSIX_SPAWN_DUP2, feed_r, 0),
                                           (os.POSIX_SPAWN_DUP2, echo_w, 1),
                                           (os.POSIX_SPAWN_DUP2, info_w, 3)])
    finally:
        for fd in (info_w, feed_r, echo_w):
            os.close(fd)
    try:
        info = _read_until_eof(info_r, READY_TIMEOUT_S)
        child = int(json.loads(info or b"{}").get("child-pid", 0))
        if child <= 0:
            raise OSError("bwrap could not make the sandbox (see the log above)")
        os.write(feed_w, b"x")
        ready, _, _ = select.select([echo_r], [], [], READY_TIMEOUT_S)
        if not ready or os.read(echo_r, 1) != b"x":
            raise OSError("the sandbox did not come up (see the log above)")
        names = ("pid", "mnt", "ipc") + (("user",) if os.geteuid() != 0 else ())
        namespaces = {name: os.open(f"/proc/{child}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
                      for name in names}
        if "user" in namespaces:
            namespaces["owner"] = fcntl.ioctl(namespaces["pid"], _NS_GET_USERNS)
    except (OSError, ValueError) as exc:
        os.close(feed_w)
        raise OSError(str(exc)) from exc
    finally:
        os.close(info_r)
        os.close(echo_r)
    return Holder(pid=pid, namespaces=namespaces, keep=feed_w)


def join_pid_namespace(holder: Holder) -> None:
    """In the wrapper: what it forks from now on is born inside the sandbox."""
    if "owner" in holder.namespaces:  # not root: the caps to join come from the owner
        setns(holder.namespaces["owner"], CLONE_NEWUSER)
    setns(holder.namespaces["pid"], CLONE_NEWPID)


def join_view(holder: Holder) -> int | None:
    """In the wrapper's child: see the sandbox's filesystem and IPC, as a cold worker does.

    Returns the sandbox's own user namespace (an fd) for the worker to join last (`join_user`);
    None as root, where there is none."""
    setns(holder.namespaces["mnt"], CLONE_NEWNS)
    setns(holder.namespaces["ipc"], CLONE_NEWIPC)
    user = holder.namespaces.pop("user", None)
    holder.close_namespaces()
    os.close(holder.keep)
    return user


def join_user(fd: int) -> None:
    """In the worker, where not root: into the sandbox's own user namespace (then its uid is
    its own there, as a cold worker's is); the capabilities it gets there go next."""
    setns(fd, CLONE_NEWUSER)
    os.close(fd)


def drop_privileges() -> None:
    """Give up every capability for good, then set no_new_privs (as bwrap does)."""
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as fh:
        last = int(fh.read())
    for cap in range(last + 1):
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"dropping capability {cap}")
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "ambient caps")
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    no_new_privs()


def no_new_privs() -> None:
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
