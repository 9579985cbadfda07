"""Values within reason: absurd quantities, durations and counts, unknown recipe operators and
constraints on readings nothing produces are refused or reported, naming file and line."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from cairn.cli.main import cli
from cairn.errors import InvalidInput
from cairn.recipes.catalog import load_catalog
from cairn.recipes.checks import parse_duration as parse_check_timeout
from cairn.recipes.expressions import ExpressionError, parse_expression
from cairn.recipes.lint import lint_catalog
from cairn.spec import parse_cpus, parse_duration, parse_gpus, parse_memory
from cairn.spec.job import load_job_spec

REPO = Path(__file__).resolve().parents[2]


def job_spec(tmp_path: Path, extra: str = "", resources: str = "") -> Path:
    (tmp_path / "code").mkdir(exist_ok=True)
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent("""\
        name: bounds
        code: code
        roles:
          client:
            entrypoint: python main.py
            sites: [site-a]
        """) + (f"    resources: {{{resources}}}\n" if resources else "") + extra,
        encoding="utf-8")
    return path


@pytest.mark.parametrize(("resources", "line", "field", "problem"), [
    ("gpus: 1e99", 7, "roles.client.resources.gpus", "'1e99' is far too large"),
    ("memory: 1e99Gi", 7, "roles.client.resources.memory", "'1e99Gi' is far too large"),
    ("cpus: 1e99", 7, "roles.client.resources.cpus", "far too large for a cpus quantity"),
    ("gpus: 100001", 7, "roles.client.resources.gpus", "more than the limit of 100000 GPUs"),
    ("memory: 2Ei", 7, "roles.client.resources.memory", "more than the limit of 1Ei"),
    ("cpus: 20M", 7, "roles.client.resources.cpus", "more than the limit of 10000000 CPUs"),
])
def test_absurd_quantities_in_a_job_spec(tmp_path: Path, resources: str, line: int,
                                         field: str, problem: str) -> None:
    spec = job_spec(tmp_path, resources=resources)
    with pytest.raises(InvalidInput) as err:
        load_job_spec(spec)
    assert str(err.value).startswith(f"{spec}:{line}: {field}: ")
    assert problem in err.value.message


@pytest.mark.parametrize(("extra", "field", "problem"), [
    ("timeout: 400d\n", "timeout", "'400d' is longer than the limit of 366d"),
    ("queue_timeout: 99999999999\n", "queue_timeout", "longer than the limit of 366d"),
    ("retries: 1000000\n", "retries", "1000000 is more than the limit of 100"),
])
def test_absurd_durations_and_counts(tmp_path: Path, extra: str, field: str,
                                     problem: str) -> None:
    spec = job_spec(tmp_path, extra=extra)
    with pytest.raises(InvalidInput) as err:
        load_job_spec(spec)
    assert err.value.field == field and err.value.line == 7
    assert problem in err.value.message


def test_bounds_are_inclusive_and_reasonable_values_load(tmp_path: Path) -> None:
    assert parse_gpus(100_000) == 100_000
    assert parse_memory("1Ei") == 2**60
    assert parse_cpus("10M") == 10**10
    assert parse_duration("366d") == 366 * 86400
    spec = job_spec(tmp_path, extra="timeout: 7d\nretries: 100\n",
                    resources="gpus: 8, cpus: 64, memory: 512Gi")
    loaded = load_job_spec(spec)
    assert loaded.retries == 100 and loaded.timeout_s == 7 * 86400


def test_huge_exponents_and_digit_strings_cost_nothing() -> None:
    """No billion-digit integer is ever built, and no ValueError leaks as a traceback."""
    with pytest.raises(InvalidInput, match="far too large"):
        parse_memory("1e999999999")
    with pytest.raises(InvalidInput, match=r"is not a duration"):
        parse_duration("9" * 5000 + "s")
    with pytest.raises(InvalidInput, match=r"is not a duration"):
        parse_check_timeout("9" * 5000 + "s")
    with pytest.raises(InvalidInput) as err:
        parse_duration(10**5000)
    assert len(err.value.message) < 100


@pytest.mark.parametrize(("value", "op"), [
    ("=> 5.10", "=>"), ("=< 2", "=<"), (">> 1", ">>"), ("= 3", "="), ("!5", "!"),
    (">=6.8,=>7", "=>"), (">= =5", ">= ="),
])
def test_unknown_operators_are_errors(value: str, op: str) -> None:
    with pytest.raises(ExpressionError, match=f"unknown operator {op!r}"):
        parse_expression(value)


@pytest.mark.parametrize("value", [">= 5.10", "5.10", '"=quoted"', "!= 3", "~ ^a", "^1.2",
                                   "in [a, b]", ">=6.8,<7"])
def test_known_operators_still_parse(value: str) -> None:
    parse_expression(value)


def catalog_copy(tmp_path: Path) -> Path:
    root = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", root)
    return root


def test_unknown_operator_fails_the_recipe_load_naming_file_and_line(tmp_path: Path) -> None:
    root = catalog_copy(tmp_path)
    (root / "mixins" / "kernel-floor.yaml").write_text(textwrap.dedent("""\
        name: kernel-floor
        constraints:
          - name: OS.sysctl./proc/sys/kernel/osrelease
            value: "=> 5.10"
        """), encoding="utf-8")
    with pytest.raises(InvalidInput) as err:
        load_catalog(root)
    assert str(err.value).startswith("mixins/kernel-floor.yaml:4: constraints[0].value: ")
    assert "unknown operator '=>'" in str(err.value)


def test_lint_names_recipe_line_and_unknown_reading(tmp_path: Path) -> None:
    root = catalog_copy(tmp_path)
    (root / "mixins" / "typo.yaml").write_text(textwrap.dedent("""\
        name: typo
        constraints:
          - name: OS.release.ID
            value: ubuntu
          - name: GPU.hardwere.model
            value: H100
        validation:
          performance:
            constraints:
              - name: gpu-matmul-tflops
                value: ">= 1"
        """), encoding="utf-8")
    findings = [f for f in lint_catalog(load_catalog(root)) if f.recipe == "typo"]
    assert [(f.file, f.line, f.reading) for f in findings] == [
        ("mixins/typo.yaml", 5, "GPU.hardwere.model"),
        ("mixins/typo.yaml", 10, "gpu-matmul-tflops"),
    ]
    result = CliRunner().invoke(cli, ["recipe", "lint", "--catalog", str(root)])
    assert result.exit_code == 1
    assert ("mixins/typo.yaml:5: constraints[1].name: recipe 'typo': no collector or check "
            "produces the reading 'GPU.hardwere.model'") in result.output


def test_lint_accepts_collected_and_emitted_readings(tmp_path: Path) -> None:
    root = catalog_copy(tmp_path)
    catalog = load_catalog(root)
    emitted = sorted({name for check in catalog.checks.values() for name in check.emits})
    assert emitted, "the shipped check catalog emits readings"
    (root / "mixins" / "fine.yaml").write_text(textwrap.dedent(f"""\
        name: fine
        constraints:
          - {{name: OS.sysctl./proc/sys/kernel/osrelease, value: ">= 5.10"}}
          - {{name: GPU.gpu3.memory-total-bytes, value: ">= 1GiB"}}
          - {{name: K8s.server.version, value: ">= 1.30"}}
        validation:
          performance:
            constraints:
              - {{name: {emitted[0]}, value: ">= 1"}}
        """), encoding="utf-8")
    assert [f for f in lint_catalog(load_catalog(root)) if f.recipe == "fine"] == []


def test_a_5000_digit_number_in_a_spec_is_one_error(tmp_path: Path) -> None:
    spec = job_spec(tmp_path, extra="timeout: " + "9" * 5000 + "\n")
    with pytest.raises(InvalidInput) as err:
        load_job_spec(spec)
    assert err.value.file == str(spec) and err.value.line == 7


def test_recipe_node_counts_have_a_bound(tmp_path: Path) -> None:
    root = catalog_copy(tmp_path)
    (root / "overlays" / "huge.yaml").write_text(textwrap.dedent("""\
        name: huge
        criteria: {nodes: 1000000000}
        """), encoding="utf-8")
    with pytest.raises(InvalidInput) as err:
        load_catalog(root)
    assert err.value.file == "overlays/huge.yaml"
    assert "1000000000 is more than the limit of 100000 nodes" in err.value.message


def test_every_shipped_recipe_tests_only_readings_something_produces() -> None:
    from cairn.recipes import default_catalog_dir

    assert lint_catalog(load_catalog(default_catalog_dir())) == []
