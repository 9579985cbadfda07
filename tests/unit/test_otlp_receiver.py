"""The one OTLP receiver the tests, the benchmarks and the compose stack share: as a program
(what docker-compose.test.yml runs in place of Jaeger), spans in and a summary out; garbage
answered 400 and survived."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cairn import tracespool
from tests.unit.test_tracespool import spool_spans
from tools.otlp_receiver import OtlpReceiver

PROGRAM = Path(__file__).resolve().parents[2] / "tools" / "otlp_receiver.py"


def _line(proc: subprocess.Popen[str], starts: str, ends: str = "") -> str:
    assert proc.stdout is not None
    for line in proc.stdout:  # ends when the program does: a bounded wait
        if line.startswith(starts) and line.rstrip().endswith(ends):
            return line.strip()
    raise AssertionError(f"the receiver ended without saying {starts!r}...{ends!r}")


def test_the_program_counts_what_it_receives(tmp_path: Path) -> None:
    summary = tmp_path / "spans.json"
    # Isolated, from elsewhere: the compose stack runs it with nothing of this repository.
    argv = [sys.executable, "-I", str(PROGRAM), "--port", "0", "--summary", str(summary)]
    with subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, text=True) as proc:
        try:
            said = _line(proc, "OTLP/HTTP receiver on ")
            endpoint = said.split()[-1].removesuffix("/v1/traces")
            spool = tmp_path / tracespool.SPOOL_NAME
            spool_spans(spool, "first", "second")
            assert tracespool.forward(spool, endpoint) == 2
            _line(proc, "received ", "total 2")  # one line per export, as they come
            counts = json.loads(summary.read_text())
            assert counts["spans"] == 2 and counts["by_name"] == {"first": 1, "second": 1}
            with urllib.request.urlopen(f"{endpoint}/", timeout=5) as health:
                assert json.load(health) == {"spans": 2}
        finally:
            proc.terminate()


@pytest.mark.parametrize(("path", "body", "status"), [
    ("/v1/traces", b"\xff not protobuf", 400),
    ("/v1/traces", b"", 400),
    ("/v1/metrics", b"x", 404),
])
def test_garbage_is_answered_and_kept_nowhere(path: str, body: bytes, status: int) -> None:
    with OtlpReceiver() as receiver:
        request = urllib.request.Request(f"{receiver.endpoint}{path}", data=body,
                                         headers={"Content-Type": "application/x-protobuf"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        refused.value.close()
        assert refused.value.code == status
        assert receiver.spans() == []
