"""What a process-backend worker can see: a bubblewrap sandbox with a minimal filesystem view.

The view, as bwrap arguments (`Sandbox.argv`), built once per backend for the static part:

- `/usr` and the top-level links into it (`/bin`, `/lib`, ...), read-only;
- a copy of the few entries of `/etc` that name resolution, TLS roots, the dynamic loader
  and the time zone need (`_etc.py`), read-only; not `/etc` as a whole, which may hold a
  site's own files;
- the interpreter that runs workers and every folder its libraries come from: its prefix and
  base prefix, the folders on `sys.path`, Cairn's library where it really is (an editable
  install links to it) and this folder, with the exit wrapper (`interpreter_roots`),
  read-only; plus the site's `process.read_only` paths;
- a fresh `/proc` (its own pid namespace: no process of the site is visible), a minimal
  `/dev`, a private `/tmp` and `/dev/shm`, and `/sys` read-only;

and per launch: the worker's own working directory, read-write; each dataset at its real
path (the `$CAIRN_DATA/<name>` links point there), read-only unless `mode: rw`; the worker's
memory cgroup, so it can join it; the GPU device nodes when it was given GPUs.

Nothing else of the site: no kits, no `.cairn/trust`, no `local/`, no other worker's folder.
A path that is, holds or lies inside one of the launcher's own secrets (`Protected`) is never
mounted, whoever asks: an interpreter root that holds one is left out, a dataset is refused.

Every folder on the way to a mount point is made `0755` in the sandbox (bwrap would make it
`0700` or copy the host's mode, and a worker under its own uid must get through), so the
worker can reach what it was given and can list nothing else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cairn.errors import InvalidInput, Unavailable
from cairn.launcher.backends._etc import ETC, EtcCopy
from cairn.launcher.backends.errors import LaunchFailed

TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
GPU_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Protected:
    """Paths no worker may see: a mount that is one of them, holds one or lies inside one is
    refused. The launcher's credentials and kit, its site config and `local/`, the site
    workdir (every worker's folder and code bundle) and, for a kit under `kits/`, the trust
    folder around it (the root seed)."""

    paths: tuple[Path, ...] = ()

    @classmethod
    def of(cls, paths: Iterable[str | Path | None]) -> Protected:
        found: list[Path] = []
        for path in paths:
            if not path:
                continue
            real = Path(os.path.realpath(path))
            found.append(real)
            if real.parent.parent.name == "kits":  # <trust>/kits/<name>/<kind>.creds
                found.append(real.parent.parent.parent)
        return cls(tuple(dict.fromkeys(found)))

    def problem(self, source: Path) -> str | None:
        """Why `source` must not be mounted, or None."""
        for path in self.paths:
            if source == path:
                return f"{source} is {path}"
            if path.is_relative_to(source):
                return f"{source} holds {path}"
            if source.is_relative_to(path):
                return f"{source} lies inside {path}"
        return None


def find_bwrap() -> str | None:
    """Debian's `/usr/bin/bwrap`, else the one on PATH."""
    if os.access("/usr/bin/bwrap", os.X_OK):
        return "/usr/bin/bwrap"
    return shutil.which("bwrap")


def interpreter_roots(python: str) -> list[Path]:
    """Folders the interpreter and its libraries are read from (not yet minimal)."""
    import cairn

    found = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                               sys.base_exec_prefix)]
    found.append(Path(os.path.realpath(python)).parent.parent)  # <prefix>/bin/python3.x
    cwd = os.getcwd()
    for entry in sys.path:
        if entry and os.path.abspath(entry) != cwd and os.path.exists(entry):
            found.append(Path(os.path.realpath(entry)))
    # Cairn's library where it really is (an editable install links there) and the exit
    # wrapper's folder; not the services, which are the parents' business, not a job's.
    found.append(Path(os.path.realpath(cairn.__file__)).parent)
    found.append(Path(os.path.realpath(__file__)).parent)
    return found


def minimal(paths: Iterable[Path], covered: Sequence[Path] = ()) -> list[Path]:
    """The paths none of which lies inside another (or inside `covered`), shortest first."""
    out: list[Path] = []
    for path in sorted(set(paths), key=lambda p: (len(p.parts), str(p))):
        if any(path.is_relative_to(q) for q in (*covered, *out)):
            continue
        out.append(path)
    return out


class Sandbox:
    """bwrap arguments for one site's workers (see the module docstring).

    Args:
        bwrap: The bwrap program.
        python: The interpreter workers run.
        read_only: More host paths workers may read (site.yaml `process.read_only`).
        protected: What no worker may see.
    """

    def __init__(self, bwrap: str, python: str, *, read_only: Sequence[str] = (),
                 protected: Protected = Protected(), etc: EtcCopy | None = None) -> None:
        self.bwrap = bwrap
        self.protected = protected
        self.etc = etc
        self.skipped: list[str] = []
        """Interpreter folders left out because they hold something protected."""
        usr = Path("/usr")
        roots = []
        for root in minimal(interpreter_roots(python), covered=[usr]):
            why = protected.problem(root) or ("it is /" if root == Path("/") else None)
            if why is None:
                roots.append(root)
            else:
                self.skipped.append(f"{root} ({why})")
        extra = []
        for text in read_only:
            path = Path(os.path.realpath(text))
            if not path.exists():
                raise InvalidInput(f"{text} does not exist", field="process.read_only")
            if why := protected.problem(path):
                raise InvalidInput(f"{text}: {why}; workers must not see it",
                                   field="process.read_only")
            extra.append(path)
        self.roots = minimal([*roots, *extra], covered=[usr])
        self._made: set[Path] = set()
        args: list[str] = ["--unshare-pid", "--unshare-ipc", "--ro-bind", "/usr", "/usr"]
        for name in TOP_LEVEL:
            path = Path("/") / name
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                args += ["--ro-bind", str(path), str(path)]
        if etc is not None:
            args += ["--ro-bind", str(etc.folder), "/etc"]
            for folder in etc.folders():
                args += ["--ro-bind", folder, folder]
        else:  # the same entries, each on its own (slower to start: one mount each)
            for name in ETC:
                entry = Path("/etc") / name
                if os.path.lexists(entry):
                    args += [*self._folders_to(entry), "--ro-bind-try", str(entry), str(entry)]
        args += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/sys", "/sys",
                 "--perms", "01777", "--tmpfs", "/tmp", "--perms", "01777", "--tmpfs", "/dev/shm"]
        for root in self.roots:
            args += self._folders_to(root)
            args += ["--ro-bind", str(root), str(root)]
        self.static = args
        self.holder = next((c for c in ("/usr/bin/cat", "/bin/cat") if os.access(c, os.X_OK)),
                           "cat")

    def refresh(self) -> None:
        """Bring the sandbox's `/etc` up to date with the host's (before each launch).
        Blocking file I/O."""
        if self.etc is not None:
            self.etc.refresh()

    def _folders_to(self, path: Path, made: set[Path] | None = None) -> list[str]:
        """`--dir` (mode 0755) for each folder on the way to `path` not made yet."""
        made = self._made if made is None else made
        args: list[str] = []
        for folder in reversed(path.parents):
            if folder == Path("/") or folder in made or folder.is_relative_to("/usr") \
                    or folder.is_relative_to("/sys") or folder == Path("/tmp"):
                continue
            made.add(folder)
            args += ["--perms", "0755", "--dir", str(folder)]
        return args

    def argv(self, workdir: Path, *, datasets: Iterable[tuple[str, str, str]] = (),
             cgroup: str | None = None, gpus: Sequence[str] = (),
             caps: Sequence[str] = ()) -> list[str]:
        """`bwrap ...` for one worker, up to (not including) the `--` before its command.

        Args:
            workdir: Its working directory (bound read-write at the same path).
            datasets: (name, real source path, mode) of each dataset it is given.
            cgroup: Its memory cgroup folder, which it joins from inside.
            gpus: The GPUs it was given; with none, no GPU device is there at all.
            caps: Capabilities the command keeps (the exit wrapper's CAP_SETUID and
                CAP_SETGID, to start the worker under its own uid).

        Raises:
            LaunchFailed: a dataset that must not be mounted (see `Protected`).
        """
        made = set(self._made)
        args = [self.bwrap, *self.static, *self._folders_to(workdir, made),
                "--bind", str(workdir), str(workdir)]
        for name, source, mode in datasets:
            path = Path(source)
            if why := self.protected.problem(path):
                raise LaunchFailed(f"dataset {name!r}: {why}; the sandbox does not mount it",
                                   field="datasets")
            args += [*self._folders_to(path, made),
                     "--bind" if mode == "rw" else "--ro-bind", str(path), str(path)]
        if cgroup is not None:
            args += ["--bind", cgroup, cgroup]
        if gpus:
            # Every GPU node: CUDA numbers the devices it can open, so hiding the others would
            # renumber them; CUDA_VISIBLE_DEVICES still says which ones are the worker's.
            nodes = [f"/dev/{n}" for n in GPU_NODES]
            with contextlib.suppress(OSError):
                nodes += sorted(f"/dev/{n}" for n in os.listdir("/dev")
                                if n.startswith("nvidia") and n[6:].isdigit())
            if os.path.isdir("/dev/nvidia-caps"):
                nodes.append("/dev/nvidia-caps")
            for node in nodes:
                args += ["--dev-bind-try", node, node]
        for cap in caps:
            args += ["--cap-add", cap]
        return [*args, "--chdir", str(workdir)]

    def probe(self, wrapper: str, python: str, uid: int | None, workdir: Path) -> None:
        """Start the interpreter in an empty sandbox the way a worker starts (under `uid`,
        when given): the sure test that bwrap and namespaces work here.

        Raises:
            Unavailable: it did not start, with bwrap's (or the interpreter's) words.
        """
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.refresh()
        except OSError as exc:
            raise Unavailable(f"cannot write the sandbox's /etc copy: {exc}") from exc
        caps = ("CAP_SETUID", "CAP_SETGID") if uid is not None else ()
        cmd = [*self.argv(workdir, caps=caps), "--", python, "-I", "-S", wrapper, "--probe",
               "-" if uid is None else str(uid), python]
        try:
            done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=PROBE_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Unavailable(f"bwrap did not run: {exc}") from exc
        if done.returncode != 0:
            said = (done.stderr or done.stdout).decode(errors="replace").strip()
            raise Unavailable(f"bwrap could not start a worker here (exit {done.returncode}): "
                              f"{said[-500:] or 'no output'}")
