"""An authority that exits before it is ready is reported with what it last wrote, so the
operator (and a CI log) sees why without opening a file that may be gone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cairn.errors import Unavailable
from cairn.runtime import secure


def test_an_authority_that_exits_is_reported_with_its_last_lines(tmp_path: Path) -> None:
    trust = secure.Trust(dir=tmp_path / "trust")
    trust.authority.mkdir(parents=True)
    log = tmp_path / "authority.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c",
             "import sys\nfor i in range(20): print(f'line {i}')\n"
             "print('error: the bucket authority: NATS did not answer'); sys.exit(3)"],
            stdout=out, stderr=subprocess.STDOUT)
        proc.wait()
    with pytest.raises(Unavailable) as caught:
        secure.wait_authority(trust, proc, log, timeout=5)
    message = str(caught.value)
    assert "exited with 3" in message and str(log) in message
    assert "error: the bucket authority: NATS did not answer" in message
    assert "line 19" in message and "line 5" not in message, "its last lines, not all"


def test_no_log_says_nothing_more(tmp_path: Path) -> None:
    assert secure.last_words(tmp_path / "absent.log") == ""
    (tmp_path / "empty.log").write_text("\n\n")
    assert secure.last_words(tmp_path / "empty.log") == ""
