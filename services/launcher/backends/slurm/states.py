"""A Slurm job's state as Cairn reads it, and how an ended job maps to a typed cause: pure.

Both drivers fill one `JobStatus`: from `squeue --json` / `GET /slurm/v0.0.38/jobs` while the
controller remembers the job (`MinJobAge`), and from `sacct` / `GET /slurmdb/v0.0.38/job/<id>`
once it has forgotten it; the accounting database is the authority then.

`DerivedExitCode` is the highest exit code of any step of the job. A batch script that runs a
failing `srun` step and then exits 0 is COMPLETED with ExitCode 0 but DerivedExitCode 1: read
alone, ExitCode would call that a success.
"""

from __future__ import annotations

import signal as signals
from typing import Any

import msgspec

from cairn.launcher.backends.base import ExitCause
from cairn.worker.allocation import MISMATCH_EXIT

# States in which the job is not over yet (COMPLETING: its processes are still being reaped).
ACTIVE = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
})
# Ended states that are not the worker's own doing, with what to tell people.
_INFRASTRUCTURE = {
    "NODE_FAIL": "a node of its allocation failed",
    "BOOT_FAIL": "a node of its allocation failed to boot",
    "PREEMPTED": "preempted by a higher-priority job",
    "REVOKED": "revoked by a federated sibling cluster",
    "SPECIAL_EXIT": "held by Slurm after a special exit",
}


class JobStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One Slurm job, as a driver saw it.

    Attributes:
        job_id: Slurm's job id.
        state: The base state (`RUNNING`, `TIMEOUT`, ...; `CANCELLED by 0` is `CANCELLED`).
        reason: Why it pends or ended (`Resources`, `OutOfMemory`, ...); empty when none.
        exit_code: The batch script's exit code, when it exited.
        signal: The signal that ended the batch script, when one did.
        derived_code: DerivedExitCode's code: the highest of any step.
        derived_signal: DerivedExitCode's signal.
        comment: The job's comment (Cairn's ownership tag).
        nodes: The node list, once allocated.
        from_accounting: True when it came from slurmdbd (the controller forgot the job).
    """

    job_id: str
    state: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    derived_code: int | None = None
    derived_signal: int | None = None
    comment: str = ""
    nodes: str = ""
    from_accounting: bool = False

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def base_state(text: str) -> str:
    """`CANCELLED by 0` -> `CANCELLED`; `RUNNING+` style flags are dropped too."""
    return text.strip().split(" ", 1)[0].rstrip("+").upper()


def split_wait_status(raw: int | None) -> tuple[int | None, int | None]:
    """(exit code, signal) from the raw wait(2) status that the job APIs report."""
    if raw is None:
        return None, None
    sig = raw & 0x7F
    if sig:
        return None, sig
    return (raw >> 8) & 0xFF, None


def split_code_signal(text: str) -> tuple[int | None, int | None]:
    """sacct's `code:signal` (`3:0`, `0:9`) as (exit code, signal); signal None when 0."""
    code, _, sig = text.strip().partition(":")
    try:
        code_n, sig_n = int(code), int(sig or 0)
    except ValueError:
        return None, None
    return (None, sig_n) if sig_n else (code_n, None)


def from_job_json(job: dict[str, Any]) -> JobStatus:
    """A job of `squeue --json` or `GET /slurm/v0.0.38/jobs` (the same data parser)."""
    code, sig = split_wait_status(_int(job.get("exit_code")))
    dcode, dsig = split_wait_status(_int(job.get("derived_exit_code")))
    return JobStatus(
        job_id=str(job.get("job_id", "")), state=base_state(str(job.get("job_state", ""))),
        reason=_reason(job.get("state_reason")), exit_code=code, signal=sig,
        derived_code=dcode, derived_signal=dsig, comment=str(job.get("comment") or ""),
        nodes=str(job.get("nodes") or ""))


def from_sacct_line(line: str) -> JobStatus | None:
    """A line of `sacct -X -P -n -o <cli.SACCT_FIELDS>` (comment may hold `|`)."""
    parts = line.split("|")
    if len(parts) < 7 or not parts[0].strip():
        return None
    code, sig = split_code_signal(parts[2])
    dcode, dsig = split_code_signal(parts[3])
    return JobStatus(job_id=parts[0].strip(), state=base_state(parts[1]),
                     reason=_reason(parts[4]), exit_code=code, signal=sig, derived_code=dcode,
                     derived_signal=dsig, comment="|".join(parts[5:-1]), nodes=parts[-1],
                     from_accounting=True)


def from_slurmdb_json(job: dict[str, Any]) -> JobStatus:
    """A job of `GET /slurmdb/v0.0.38/job/<id>`."""
    state = job.get("state") or {}
    code, sig = _db_exit(job.get("exit_code"))
    dcode, dsig = _db_exit(job.get("derived_exit_code"))
    if not dcode and not dsig and _failed_steps(job.get("steps")):
        # 22.05's slurmdb parser reports a failed step's exit code as 0; its state is right.
        dcode = 1
    comment = job.get("comment") or {}
    return JobStatus(
        job_id=str(job.get("job_id", "")), state=base_state(str(state.get("current", ""))),
        reason=_reason(state.get("reason")), exit_code=code, signal=sig, derived_code=dcode,
        derived_signal=dsig,
        comment=str(comment.get("job") or "") if isinstance(comment, dict) else str(comment),
        nodes=str(job.get("nodes") or ""), from_accounting=True)


def classify(status: JobStatus, *, cancelled: bool = False,
             timed_out: bool = False) -> tuple[int | None, ExitCause | None, str]:
    """(exit code, cause, message) for an ended job.

    Args:
        cancelled: Cairn cancelled it (a CANCELLED state then is `cancelled`, not a crash).
        timed_out: Cairn stopped it at its deadline (before Slurm's minute-granular limit).
    """
    code = _code(status.exit_code, status.signal)
    how = _how(status.exit_code, status.signal)
    reason = f" ({status.reason})" if status.reason and status.reason != "None" else ""
    state = status.state
    if timed_out:
        return code, "timeout", "ran past its timeout and was cancelled"
    if cancelled:
        # Whatever state the cancel left (CANCELLED, or FAILED when the worker's SIGTERM
        # handler exited nonzero): it ended because Cairn asked.
        return code, "cancelled", f"cancelled ({state}, {how})"
    if state in ("TIMEOUT", "DEADLINE"):
        return code, "timeout", f"Slurm ended it at its time limit ({state})"
    if state == "OUT_OF_MEMORY":
        return 128 + signals.SIGKILL, "oom", "killed by Slurm for using more memory than --mem"
    if state in _INFRASTRUCTURE:
        return code, "infrastructure", f"{_INFRASTRUCTURE[state]} ({state})"
    if state == "CANCELLED":
        return code, "infrastructure", f"cancelled outside Cairn{reason}"
    if state == "COMPLETED" and code == 0:
        dcode = _code(status.derived_code, status.derived_signal)
        if dcode:
            return dcode, "crashed", (f"a job step failed: DerivedExitCode "
                                      f"{_how(status.derived_code, status.derived_signal)}, "
                                      "though the batch script exited 0")
        return 0, None, "exited with code 0"
    if state == "FAILED" and code == MISMATCH_EXIT:
        return code, "allocation-mismatch", ("a node did not get the GPUs asked for "
                                             "(see worker.log)")
    if state in ("COMPLETED", "FAILED"):
        if code is None:
            return None, "launch-failed", f"Slurm could not start it{reason}"
        return code, "crashed", f"{how}{reason}"
    return code, "infrastructure", f"ended in Slurm state {state}{reason}"


def _code(code: int | None, sig: int | None) -> int | None:
    if sig:
        return 128 + sig
    return code


def _how(code: int | None, sig: int | None) -> str:
    if sig:
        try:
            name = signals.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    return f"exited with code {code}"


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict):  # newer data parsers: {"set": true, "number": N}
        number = value.get("number")
        return number if isinstance(number, int) and value.get("set", True) else None
    return None


def _db_exit(value: Any) -> tuple[int | None, int | None]:
    if not isinstance(value, dict):
        return None, None
    sig = (value.get("signal") or {}).get("signal_id")
    if value.get("status") == "SIGNALED" and isinstance(sig, int):
        return None, sig
    code = value.get("return_code")
    return (code if isinstance(code, int) else None), None


def _failed_steps(steps: Any) -> bool:
    if not isinstance(steps, list):
        return False
    for step in steps:
        if not isinstance(step, dict):
            continue
        name = str((step.get("step") or {}).get("id") or step.get("step_id") or "")
        state = base_state(str(step.get("state") or ""))
        if not name.endswith(("batch", "extern")) and state not in ("COMPLETED", "RUNNING",
                                                                     "PENDING", ""):
            return True
    return False


def _reason(value: Any) -> str:
    text = str(value or "").strip()
    return "" if text == "None" else text
