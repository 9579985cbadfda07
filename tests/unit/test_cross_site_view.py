"""`cairn job show` draws a result's cross-site evaluation matrix, and survives one that a job
got wrong (the value is whatever the job sent)."""

from __future__ import annotations

import pytest

from cairn.cli.jobview import print_cross_site
from cairn.worker.workflows.crosssite import CrossSite


def test_the_matrix_is_a_table_of_each_cells_first_metric(
        capsys: pytest.CaptureFixture[str]) -> None:
    matrix = CrossSite(models=["global", "site-a", "site-b"],
                       scores={"site-b": {"global": {"accuracy": 0.9}, "site-a": {"accuracy": 0.5},
                                          "site-b": {"accuracy": 0.97}},
                               "site-a": {"global": {"accuracy": 0.91}}},
                       missing={"site-c": "no answer within 60s"}).to_json()
    print_cross_site(matrix)
    out = capsys.readouterr().out
    assert "cross-site evaluation (accuracy" in out
    lines = [line for line in out.splitlines() if "site-a" in line and "0.9100" in line]
    assert lines and "-" in lines[0]  # site-a scored only the global model
    assert "0.9700" in out and "site-c: no answer within 60s" in out


@pytest.mark.parametrize("matrix", [
    {}, {"models": "global"}, {"models": ["global"], "scores": ["x"]},
    {"models": ["global"], "scores": {"site-a": "garbage"}},
    {"models": ["global"], "scores": {"site-a": {"global": "nan"}}},
])
def test_a_malformed_matrix_prints_what_it_can(matrix: dict[str, object],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    print_cross_site(matrix)  # no traceback
    capsys.readouterr()
