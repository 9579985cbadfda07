"""How a process-backend site keeps job code from its parent's secrets, chosen once at start.

Two mechanisms, each used where it works (docs/sites/process.md):

- a bubblewrap sandbox (`_sandbox.py`): the worker sees only the interpreter, its own folder
  and its datasets, in its own pid namespace;
- a uid of its own (`_uids.py`), where the launcher runs as root: its files, `/proc` entries
  and signals are out of reach of every other worker and of the launcher's files.

`sandbox: auto` (the default) takes bwrap where it starts a worker here, `bwrap` insists on
it, `none` goes without (and says so). `worker_uids: auto` takes a block of uids chosen by
the site's workdir as root, none otherwise; `none` goes without; `FIRST-LAST` names the
range. A site with neither runs job code as itself, so it runs only studies its operator
marked `trusted_code: true`.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cairn.errors import CairnError, InvalidInput, Unavailable
from cairn.launcher.backends._etc import EtcCopy
from cairn.launcher.backends._sandbox import Protected, Sandbox, find_bwrap
from cairn.launcher.backends._uids import UidPool, auto_range, parse_range
from cairn.launcher.backends._workdir import prepare_workdir
from cairn.launcher.backends.base import LaunchSpec
from cairn.launcher.backends.errors import StudyRefused

log = logging.getLogger("cairn.launcher")

SandboxMode = Literal["auto", "bwrap", "none"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "bwrap", "none")
WRAPPER = str(Path(__file__).with_name("_exitwrap.py"))


@dataclass(frozen=True)
class Isolation:
    """What keeps this site's workers from its secrets (see the module docstring).

    Attributes:
        sandbox: The bwrap view workers run in; None: none.
        uids: The uids workers run under, one each; None: the launcher's own.
        notes: Why `auto` settled for less than it could have, for the start log.
    """

    sandbox: Sandbox | None = None
    uids: range | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def isolated(self) -> bool:
        """True when job code cannot read what the launcher can: untrusted code may run."""
        return self.sandbox is not None or self.uids is not None

    @property
    def uid_text(self) -> str:
        return "none" if self.uids is None else f"{self.uids.start}-{self.uids.stop - 1}"

    def summary(self) -> str:
        """One line for the launcher's start log."""
        if not self.isolated:
            return ("WARNING: process workers are NOT isolated (no sandbox, no worker uid): job "
                    "code could read this site's credentials, so only studies marked "
                    "trusted_code: true in study_runtime.yaml run here"
                    + "".join(f"; {note}" for note in self.notes))
        notes = "".join(f"; {note}" for note in self.notes)
        if self.sandbox is None:
            return (f"WARNING: process workers run WITHOUT a sandbox, under worker uids "
                    f"{self.uid_text} only: they see the host's /proc and whatever its files "
                    f"let any user read{notes}")
        who = f"worker uids {self.uid_text}" if self.uids else "the launcher's own uid"
        return f"process workers run isolated: bwrap sandbox, {who}{notes}"

    def admit(self, spec: LaunchSpec) -> None:
        """Refuse a study's code this site cannot keep from its secrets.

        Raises:
            StudyRefused: not isolated, and the study is not marked `trusted_code`.
        """
        if not self.isolated and not spec.trusted_code:
            raise StudyRefused(
                f"study {spec.study!r} is not marked trusted_code: true in this site's "
                "study_runtime.yaml, and this site cannot isolate its workers (no sandbox, no "
                "worker uid; see the launcher's start log): it runs only trusted code")

    def health(self) -> dict[str, Any]:
        """Fields for the launcher's health reply."""
        return {"sandbox": "bwrap" if self.sandbox else "none", "worker_uids": self.uid_text,
                "untrusted_code": "isolated" if self.isolated else "refused"}


def prepare_isolated(isolation: Isolation, uids: UidPool | None, spec: LaunchSpec,
                     root: Path) -> tuple[int | None, Path]:
    """(its uid, its working directory) for a launch, and the sandbox's /etc up to date:
    all the blocking work of a launch before it starts, for one trip to a thread."""
    uid = None if uids is None else uids.take(spec.launch_id)
    try:
        if isolation.sandbox is not None:
            isolation.sandbox.refresh()
        return uid, prepare_workdir(spec, root, secrets=True, owner=uid)
    except BaseException:
        if uids is not None:
            uids.release(spec.launch_id)
        raise


def can_set_uid() -> bool:
    """Root: may start workers under other uids and give them their folders."""
    return os.geteuid() == 0


def choose(sandbox: str = "auto", worker_uids: str = "auto", *, python: str = sys.executable,
           workdir: Path, read_only: tuple[str, ...] = (),
           protected: Protected = Protected()) -> Isolation:
    """Settle the site's isolation, probing what `auto` may use.

    Raises:
        InvalidInput: a setting that cannot be honoured here (a uid range without root,
            an unknown mode, a read_only path workers must not see).
        Unavailable: `sandbox: bwrap` but bwrap does not work here.
    """
    if sandbox not in SANDBOX_MODES:
        raise InvalidInput(f"sandbox {sandbox!r}: use auto, bwrap or none",
                           field="process.sandbox")
    notes: list[str] = []
    uids = _uids(worker_uids, workdir, notes)
    box: Sandbox | None = None
    if sandbox != "none":
        box, why = _sandbox(python, uids, workdir, read_only, protected)
        if box is None and sandbox == "bwrap":
            raise Unavailable(f"process.sandbox is bwrap, but {why}", field="process.sandbox")
        if box is None:
            notes.append(f"no sandbox: {why}")
        elif box.skipped:
            notes.append("left out of the sandbox: " + ", ".join(box.skipped))
    else:
        notes.append("sandbox: none in site.yaml")
    if uids is not None and box is None and (problem := _uid_problem(python, uids, workdir)):
        if worker_uids != "auto":
            raise InvalidInput(f"worker uid {uids.start} {problem}",
                               field="process.worker_uids")
        notes.append(f"no worker uids: uid {uids.start} {problem}")
        uids = None
    return Isolation(sandbox=box, uids=uids, notes=tuple(notes))


def _uids(setting: str, workdir: Path, notes: list[str]) -> range | None:
    if setting == "none":
        return None
    if setting == "auto":
        if can_set_uid():
            return auto_range(str(workdir))
        notes.append("no worker uids: the launcher does not run as root")
        return None
    try:
        uids = parse_range(setting)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="process.worker_uids") from None
    if not can_set_uid():
        raise InvalidInput(f"worker_uids {setting}: the launcher must run as root to start "
                           "workers under other uids", field="process.worker_uids")
    return uids


def _sandbox(python: str, uids: range | None, workdir: Path, read_only: tuple[str, ...],
             protected: Protected) -> tuple[Sandbox | None, str]:
    """(the sandbox, "") where bwrap starts a worker here, else (None, why not)."""
    bwrap = find_bwrap()
    if bwrap is None:
        return None, "bwrap is not installed (Debian: apt-get install bubblewrap)"
    box = Sandbox(bwrap, python, read_only=read_only, protected=protected,
                  etc=EtcCopy(workdir / ".sandbox-etc", uids))
    probe = workdir / ".sandbox-probe"
    try:
        box.probe(WRAPPER, python, None if uids is None else uids.start, probe)
    except CairnError as exc:
        return None, str(exc)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return box, ""


def _uid_problem(python: str, uids: range, workdir: Path) -> str | None:
    """Without a sandbox a worker's uid must reach the interpreter and the site workdir on
    the host itself: why it cannot, or None."""
    probe = [python, "-I", "-S", WRAPPER, "--probe", str(uids.start), python]
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(probe, cwd=workdir, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot be tried: {exc}"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        # The last line says why (a traceback's error line, where the probe had one).
        return (f"cannot start {python} or reach the site workdir "
                f"({said[-1][-200:] if said else f'exit {done.returncode}'})")
    return None
