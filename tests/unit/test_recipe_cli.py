"""`cairn recipe`: output formats and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.cli.main import main

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(["recipe", *args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_match_lists_overlays_in_application_order(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "match",
        "--service",
        "eks",
        "--accelerator",
        "h100",
        "--os",
        "ubuntu",
        "--intent",
        "training",
        "-o",
        "json",
        "--catalog",
        str(RECIPES),
    )
    assert code == 0
    order = [r["name"] for r in json.loads(out)]
    assert order[0] == "base" and order[-1] == "h100-eks-ubuntu-training"
    assert order.index("eks") < order.index("eks-training") < order.index("h100-eks-training")


def test_query_one_value(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "query",
        "h100-eks-ubuntu-training",
        "components.gpu-operator.version",
        "--catalog",
        str(RECIPES),
    )
    assert (code, out.strip()) == (0, "v26.7.0")


def test_show_by_criteria_and_explain(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "show",
        "--criteria",
        "accelerator=cpu",
        "--criteria",
        "scheduler=docker",
        "-o",
        "json",
        "--catalog",
        str(RECIPES),
    )
    assert code == 0 and json.loads(out)["name"] == "cpu-docker"
    code, out, _ = run(capsys, "explain", "cpu-docker", "-o", "json", "--catalog", str(RECIPES))
    rows = {r["path"]: r["file"] for r in json.loads(out)["values"]}
    assert rows["constraints.Container.docker.version.value"] == "overlays/docker.yaml"


def test_list_table_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--criteria", "scheduler=slurm", "--catalog", str(RECIPES))
    assert code == 0 and "slurm-h100" in out and "h100-eks" not in out


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("match", "--accelerator", "h900"), 3, "unknown accelerator 'h900'"),
        (("show", "no-such-recipe"), 4, "no recipe named"),
        (("show",), 3, "give a recipe NAME"),
        (("query", "cpu-docker", "components.nope"), 4, "no value at"),
        (("list", "--criteria", "colour=red"), 3, "KEY=VALUE"),
    ],
)
def test_errors_are_one_line_with_exit_codes(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], code: int, text: str
) -> None:
    got, _, err = run(capsys, *args, "--catalog", str(RECIPES))
    assert got == code
    assert text in err and err.count("\n") == 1


def test_catalog_from_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CAIRN_RECIPES", str(tmp_path))
    code, _, err = run(capsys, "list")
    assert code == 3 and "not a recipe catalog" in err
