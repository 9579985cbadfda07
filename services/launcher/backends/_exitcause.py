"""How a worker ended, from what the process backend could observe: a pure function.

Evidence, strongest first: the launch never started (wrapper record has `error`); the worker
found the wrong GPUs and ended (exit 78 with its allocation report saying so); we stopped
it (timeout, cancel); the kernel OOM-killed something in its cgroup; its exit code.

The RLIMIT_AS heuristic: under RLIMIT_AS nothing is killed, an allocation just fails. A Python
worker then dies of an uncaught `MemoryError` (exit 1) and C++ code of `std::bad_alloc`
(abort, SIGABRT). So a nonzero exit whose log ends with such a line is classified `oom`. It
can misfire on a worker that prints such a line and then fails for another reason; it never
turns a clean exit into a failure.
"""

from __future__ import annotations

import re

import msgspec

from cairn.launcher.backends._proc import signal_name
from cairn.launcher.backends.base import ExitCause
from cairn.worker.allocation import MISMATCH_EXIT

# A Python traceback's last line names the exception: "MemoryError" or "x.OutOfMemoryError: ..".
_PY_OUT_OF_MEMORY = re.compile(rb"(?:[\w.]+\.)?(?:MemoryError|OutOfMemoryError)(?::.*)?")
# How much of the log end to search: a traceback's last line is within this.
LOG_TAIL_BYTES = 4096


class ExitRecord(msgspec.Struct, frozen=True):
    """`exit.json`, as the wrapper writes it."""

    code: int | None = None
    signal: int | None = None
    error: str | None = None


class Observed(msgspec.Struct, frozen=True, kw_only=True):
    """Everything known about an ended worker."""

    record: ExitRecord | None = None
    status_code: int | None = None  # the wrapper's exit code, when we reaped it
    cancelled: bool = False
    timed_out: bool = False
    timeout_s: float | None = None
    oom_kills: int = 0
    log_tail: bytes = b""
    memory_limit: str = "none"
    allocation_mismatch: str | None = None  # the worker's own report: what it could see


def ran_out_of_memory(log_tail: bytes) -> bool:
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()][-3:]
    if lines and _PY_OUT_OF_MEMORY.fullmatch(lines[-1]):
        return True
    return any(b"std::bad_alloc" in line for line in lines)


def classify(seen: Observed) -> tuple[int | None, ExitCause | None, str]:
    """(exit code, cause, message) for an ended worker."""
    code, how = _exit_code(seen)
    if seen.record is not None and seen.record.error:
        return None, "launch-failed", seen.record.error
    if seen.allocation_mismatch is not None and code == MISMATCH_EXIT:
        return code, "allocation-mismatch", (
            f"ended before its code ran: {seen.allocation_mismatch}")
    if seen.timed_out:
        return code, "timeout", f"ran past its timeout of {seen.timeout_s:g} s and was stopped"
    if seen.cancelled:
        return code, "cancelled", f"cancelled; {how}"
    if seen.oom_kills > 0:
        return code, "oom", f"killed for using more memory than its limit ({seen.memory_limit})"
    if code == 0:
        return 0, None, how
    if code is not None and ran_out_of_memory(seen.log_tail):
        return code, "oom", f"{how}; the log ends with an allocation failure ({seen.memory_limit})"
    if code is not None:
        return code, "crashed", how
    return None, "infrastructure", "it ended while unobserved and left no exit record"


def _exit_code(seen: Observed) -> tuple[int | None, str]:
    record = seen.record
    if record is not None and record.signal is not None:
        return 128 + record.signal, f"killed by {signal_name(record.signal)}"
    if record is not None and record.code is not None:
        return record.code, f"exited with code {record.code}"
    if seen.status_code is not None:
        # No record: the wrapper itself was killed (SIGKILL to the group, or the OOM killer).
        code = seen.status_code
        return code, f"killed by {signal_name(code - 128)}" if code > 128 else f"exit {code}"
    return None, "no exit status"
