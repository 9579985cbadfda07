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
        "--accelerator",
        "cpu",
        "--scheduler",
        "docker",
        "--no-federation",
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
    code, out, _ = run(capsys, "list", "--scheduler", "slurm", "--catalog", str(RECIPES))
    assert code == 0 and "slurm-h100" in out and "h100-eks" not in out


@pytest.mark.parametrize("command", ["list", "match", "show", "explain", "query", "lint"])
def test_every_recipe_command_takes_the_same_criteria_flags(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    for flag in ("--service", "--accelerator", "--os", "--intent", "--platform", "--nodes",
                 "--criteria FILE"):
        assert flag in out, (command, flag)


def test_a_criteria_file_plain_or_as_aicr_writes_it_and_flags_win(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    aicr = tmp_path / "criteria.yaml"
    aicr.write_text("kind: RecipeCriteria\napiVersion: aicr.nvidia.com/v1alpha1\n"
                    "metadata: {name: h100-eks}\nspec:\n  service: eks\n  accelerator: h100\n"
                    "  os: ubuntu\n  intent: training\n")
    code, out, _ = run(capsys, "match", "--criteria", str(aicr), "-o", "json",
                       "--catalog", str(RECIPES))
    assert code == 0 and json.loads(out)[-1]["name"] == "h100-eks-ubuntu-training"
    plain = tmp_path / "plain.yaml"
    plain.write_text("service: eks\naccelerator: h100\nos: ubuntu\nintent: training\n")
    code, out, _ = run(capsys, "show", "--criteria", str(plain), "--platform", "kubeflow",
                       "--no-federation", "-o", "json", "--catalog", str(RECIPES))
    assert code == 0 and json.loads(out)["name"] == "h100-eks-ubuntu-training-kubeflow"
    bad = tmp_path / "bad.yaml"
    bad.write_text("service: eks\ncolour: red\n")
    code, _, err = run(capsys, "list", "--criteria", str(bad), "--catalog", str(RECIPES))
    assert code == 3 and f"{bad}:2" in err and "colour" in err and "Traceback" not in err


def test_a_recipe_name_may_be_a_unique_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "query", "cpu-dock", "name", "--catalog", str(RECIPES))
    assert (code, out.strip()) == (0, "cpu-docker")
    # Both h100-eks-ubuntu-training and its -kubeflow child start with this: both are named.
    code, _, err = run(capsys, "explain", "h100-eks-ubuntu-tr", "--catalog", str(RECIPES))
    assert code == 3 and "ambiguous" in err
    assert "h100-eks-ubuntu-training," in err and "h100-eks-ubuntu-training-kubeflow" in err
    # An exact name wins over the longer names it is a prefix of.
    code, out, _ = run(capsys, "query", "h100-eks-ubuntu-training", "name", "--catalog",
                       str(RECIPES))
    assert (code, out.strip()) == (0, "h100-eks-ubuntu-training")


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("match", "--accelerator", "h900"), 3, "unknown accelerator 'h900'"),
        (("show", "no-such-recipe"), 4, "no recipe named"),
        (("query", "cpu-docker", "components.nope"), 4, "no value at"),
    ],
)
def test_errors_are_one_line_with_exit_codes(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], code: int, text: str
) -> None:
    got, _, err = run(capsys, *args, "--catalog", str(RECIPES))
    assert got == code
    assert text in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("show",), "give a recipe NAME or criteria"),
        (("list", "--criteria", "colour=red"), "--criteria takes a FILE"),
        (("list", "-o", "out/"), "not an output format"),
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
                             text: str) -> None:
    got, _, err = run(capsys, *args, "--catalog", str(RECIPES))
    assert got == 2 and text in err and "Traceback" not in err


def test_catalog_from_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CAIRN_RECIPES", str(tmp_path))
    code, _, err = run(capsys, "list")
    assert code == 3 and "not a recipe catalog" in err
