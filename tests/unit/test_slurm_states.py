"""How Slurm job states and exit codes become Cairn causes (pure; PREEMPTED and NODE_FAIL
cannot be produced on the test cluster, so their mapping is shown here)."""

from __future__ import annotations

import pytest

from cairn.launcher.backends.slurm.states import (
    JobStatus,
    base_state,
    classify,
    from_job_json,
    from_sacct_line,
    from_slurmdb_json,
    split_code_signal,
    split_wait_status,
)


def ended(state: str, code: int | None = 0, sig: int | None = None, **kw: object) -> JobStatus:
    return JobStatus(job_id="7", state=state, exit_code=code, signal=sig, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("state", "cause", "words"), [
    ("TIMEOUT", "timeout", "time limit"),
    ("DEADLINE", "timeout", "time limit"),
    ("OUT_OF_MEMORY", "oom", "memory"),
    ("NODE_FAIL", "infrastructure", "node of its allocation failed"),
    ("BOOT_FAIL", "infrastructure", "boot"),
    ("PREEMPTED", "infrastructure", "preempted"),
    ("REVOKED", "infrastructure", "revoked"),
])
def test_states_that_are_not_the_workers_doing_map_to_typed_causes(
        state: str, cause: str, words: str) -> None:
    _code, got, message = classify(ended(state, 0, 15))
    assert got == cause and words in message


def test_oom_reports_the_kill_like_the_other_backends() -> None:
    assert classify(ended("OUT_OF_MEMORY", None, 125))[:2] == (137, "oom")


def test_cancelled_is_ours_only_when_we_cancelled() -> None:
    assert classify(ended("CANCELLED", None, 15), cancelled=True)[:2] == (143, "cancelled")
    # A worker whose SIGTERM handler exits 143 leaves FAILED, not CANCELLED.
    assert classify(ended("FAILED", 143), cancelled=True)[:2] == (143, "cancelled")
    _code, cause, message = classify(ended("CANCELLED", None, 15))
    assert cause == "infrastructure" and "outside Cairn" in message


def test_exit_codes_and_the_derived_exit_code() -> None:
    assert classify(ended("COMPLETED", 0)) == (0, None, "exited with code 0")
    assert classify(ended("FAILED", 3))[:2] == (3, "crashed")
    assert classify(ended("FAILED", None, 9))[:2] == (137, "crashed")
    # A step failed, the script exited 0 (FLARE #5093: ExitCode alone calls this a success).
    code, cause, message = classify(ended("COMPLETED", 0, derived_code=2))
    assert (code, cause) == (2, "crashed") and "DerivedExitCode" in message
    code, cause, _ = classify(ended("COMPLETED", 0, derived_signal=9))
    assert (code, cause) == (137, "crashed")


def test_the_gpu_check_exit_is_an_allocation_mismatch() -> None:
    assert classify(ended("FAILED", 78))[:2] == (78, "allocation-mismatch")


def test_our_own_timeout_wins_over_the_state() -> None:
    assert classify(ended("CANCELLED", None, 15), cancelled=True, timed_out=True)[1] == "timeout"


def test_active_states() -> None:
    for state in ("PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED"):
        assert ended(state).active
    for state in ("COMPLETED", "FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL"):
        assert not ended(state).active


def test_the_encodings_of_exit_codes() -> None:
    assert split_wait_status(768) == (3, None)        # exit 3
    assert split_wait_status(9) == (None, 9)          # SIGKILL
    assert split_wait_status(253) == (None, 125)      # 22.05's OOM encoding
    assert split_wait_status(None) == (None, None)
    assert split_code_signal("3:0") == (3, None)
    assert split_code_signal("0:9") == (None, 9)
    assert split_code_signal("junk") == (None, None)
    assert base_state("CANCELLED by 0") == "CANCELLED"


def test_squeue_json_sacct_and_slurmdb_parse_alike() -> None:
    listed = from_job_json({"job_id": 12, "job_state": "COMPLETED", "exit_code": 0,
                            "derived_exit_code": 256, "state_reason": "None",
                            "comment": "cairn:j/s/r/0/0", "nodes": "n[1-2]"})
    line = from_sacct_line("12|COMPLETED|0:0|1:0|None|cairn:j/s/r/0/0|n[1-2]")
    db = from_slurmdb_json({"job_id": 12, "state": {"current": "COMPLETED", "reason": "None"},
                            "exit_code": {"status": "SUCCESS", "return_code": 0},
                            "derived_exit_code": {"status": "SUCCESS", "return_code": 0},
                            "comment": {"job": "cairn:j/s/r/0/0"}, "nodes": "n[1-2]",
                            "steps": [{"step": {"id": "batch"}, "state": "COMPLETED"},
                                      {"step": {"id": "0"}, "state": "FAILED"}]})
    assert line is not None
    for status in (listed, line, db):
        assert (status.job_id, status.state, status.comment) == ("12", "COMPLETED",
                                                                   "cairn:j/s/r/0/0")
        assert classify(status)[:2] == (1, "crashed")
    assert line.from_accounting and db.from_accounting and not listed.from_accounting


def test_garbage_lines_are_skipped() -> None:
    assert from_sacct_line("") is None
    assert from_sacct_line("only|two") is None
    status = from_job_json({"job_state": 5, "exit_code": "x"})
    assert status.exit_code is None and status.state == "5"
