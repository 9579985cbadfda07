"""`requires:` in a job spec: recipe, max_age and signers, with errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.errors import InvalidInput
from cairn.spec.job import parse_job_spec

SPEC = """\
name: gated
code: ./app
roles:
  client:
    entrypoint: python main.py
requires:
  recipe: cpu-linux-process
  max_age: 7d
{signers}
"""


def parse(tmp_path: Path, signers: str) -> object:
    (tmp_path / "app").mkdir(exist_ok=True)
    return parse_job_spec(SPEC.format(signers=signers), "job.yaml", tmp_path)


def test_requires_with_signers(tmp_path: Path) -> None:
    spec = parse(tmp_path, "  signers: [first-party, lab-b]")
    requires = spec.requires  # type: ignore[attr-defined]
    assert (requires.recipe, requires.max_age_s, requires.signers) == (
        "cpu-linux-process", 7 * 86400, ("first-party", "lab-b"))
    assert parse(tmp_path, "").requires.signers == ()  # type: ignore[attr-defined]


def test_bad_signers_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"requires\.signers\[1\]") as bad:
        parse(tmp_path, "  signers: [first-party, Not.A.Name]")
    assert bad.value.file == "job.yaml" and bad.value.line == 9
    with pytest.raises(InvalidInput, match="listed twice"):
        parse(tmp_path, "  signers: [lab-b, lab-b]")
    with pytest.raises(InvalidInput, match="colour"):
        parse(tmp_path, "  colour: red")
