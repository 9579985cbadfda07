"""docs/security.md prints the subject table the broker enforces: regenerated, it is unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_documented_subject_table_is_the_code_s() -> None:
    done = subprocess.run([sys.executable, str(REPO / "tools" / "security_table.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_every_row_of_the_table_is_in_the_document() -> None:
    from cairn.subjects.table import CONSUMERS, STREAMS, SUBJECTS

    text = (REPO / "docs" / "security.md").read_text()
    for name in [r.key for r in SUBJECTS] + [s.name for s in STREAMS] + \
            [c.name for c in CONSUMERS]:
        assert name in text, name
