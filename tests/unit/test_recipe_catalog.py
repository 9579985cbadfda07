"""Loading catalogs: errors name file, line and field; the real catalog loads and resolves."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cairn.errors import InvalidInput, InvalidName
from cairn.recipes import (
    PHASES,
    Criteria,
    Reading,
    evaluate_constraints,
    load_catalog,
    load_checks,
    match,
    parse_duration,
    resolve,
)

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.fixture
def tmp_catalog(tmp_path: Path) -> Path:
    root = tmp_path / "recipes"
    (root / "overlays").mkdir(parents=True)
    shutil.copy(RECIPES / "criteria.yaml", root)
    shutil.copy(RECIPES / "checks.yaml", root)
    return root


def write(root: Path, name: str, text: str, folder: str = "overlays") -> None:
    (root / folder).mkdir(exist_ok=True)
    (root / folder / f"{name}.yaml").write_text(text)


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("name: x\ncriteria:\n  servce: eks\n", 3, "criteria.servce", "unknown field 'servce'"),
        (
            "name: x\nconstraints:\n  - name: K8s.server.version\n    valeu: '>= 1.30'\n",
            4,
            "constraints[0].valeu",
            "unknown field",
        ),
        (
            "name: x\ncriteria:\n  accelerator: h900\n",
            2,
            "criteria.accelerator",
            "unknown accelerator 'h900'; allowed: any, a100",
        ),
        (
            "name: x\nconstraints:\n  - name: A.b.c\n    value: '~ ['\n",
            4,
            "constraints[0].value",
            "bad expression",
        ),
        ("name: x\nbase: nowhere\n", 2, "base", "unknown base recipe"),
        ("name: x\nmixins: [nothing]\n", 2, "mixins[0]", "unknown mixin"),
        (
            "name: x\nvalidation:\n  readiness:\n    checks:\n      - name: gpu-matmul\n",
            5,
            "validation.readiness.checks[0].name",
            "belongs to phase 'performance'",
        ),
        (
            "name: x\nvalidation:\n  performance:\n    checks:\n      - name: gpu-matmull\n",
            5,
            "validation.performance.checks[0].name",
            "unknown check 'gpu-matmull'",
        ),
        (
            "name: x\nvalidation:\n  performance:\n    checks:\n"
            "      - {name: gpu-matmul, timeout: 5x}\n",
            5,
            "validation.performance.checks[0].timeout",
            "not a duration",
        ),
        (
            "name: x\nconstraints:\n  - {name: A.b.c, value: '1'}\n  - {name: A.b.c, value: '2'}\n",
            4,
            "constraints[1].name",
            "listed twice",
        ),
        ("name: y\n", 1, "name", "must live in y.yaml"),
        (
            "name: x\ncriteria: {service: eks, scheduler: docker}\n",
            2,
            "criteria.scheduler",
            "implies scheduler=kubernetes",
        ),
    ],
)
def test_bad_recipe_names_file_line_and_field(
    tmp_catalog: Path, text: str, line: int, field: str, message: str
) -> None:
    write(tmp_catalog, "x", text)
    with pytest.raises(InvalidInput) as exc:
        load_catalog(tmp_catalog)
    err = exc.value
    assert err.file == "overlays/x.yaml"
    assert err.line == line
    assert err.field == field
    assert message in err.message
    assert str(err).startswith(f"overlays/x.yaml:{line}: {field}: ")


def test_bad_recipe_name_is_invalid_name(tmp_catalog: Path) -> None:
    write(tmp_catalog, "H100.v2", "name: H100.v2\n")
    with pytest.raises(InvalidName) as exc:
        load_catalog(tmp_catalog)
    assert exc.value.exit_code == 3 and exc.value.line == 1


def test_mixin_cannot_carry_criteria(tmp_catalog: Path) -> None:
    write(tmp_catalog, "m", "name: m\ncriteria: {service: eks}\n", "mixins")
    with pytest.raises(InvalidInput, match="a mixin cannot set criteria"):
        load_catalog(tmp_catalog)


def test_base_cycle_in_files(tmp_catalog: Path) -> None:
    write(tmp_catalog, "a", "name: a\nbase: b\n")
    write(tmp_catalog, "b", "name: b\nbase: a\n")
    with pytest.raises(InvalidInput, match=r"base cycle: a -> b -> a"):
        load_catalog(tmp_catalog)


def test_new_gpu_is_one_line_in_criteria(tmp_catalog: Path) -> None:
    criteria = tmp_catalog / "criteria.yaml"
    criteria.write_text(criteria.read_text().replace("    - h100\n", "    - h100\n    - b300\n"))
    write(tmp_catalog, "b300-eks", "name: b300-eks\ncriteria: {service: eks, accelerator: b300}\n")
    catalog = load_catalog(tmp_catalog)
    assert [e.name for e in match(catalog, Criteria(service="eks", accelerator="b300"))] == [
        "b300-eks"
    ]


def test_check_catalog() -> None:
    checks = load_checks(RECIPES / "checks.yaml")
    assert set(checks) >= {
        "accelerator-discovery",
        "gpu-matmul",
        "nccl-all-reduce-bw",
        "gang-start",
        "container-gpu-access",
        "k8s-device-plugin",
        "slurm-gres",
        "cpu-smoke",
    }
    assert checks["nccl-all-reduce-bw"].timeout_seconds == 1800
    assert checks["gpu-matmul"].needs_gpu and not checks["cpu-smoke"].needs_gpu
    assert checks["gpu-matmul"].emits == {"gpu-matmul": "TFLOP/s"}


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("5m", 300), ("1h30m", 5400),
                                              ("1d", 86400)])
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_every_real_recipe_loads_and_resolves() -> None:
    catalog = load_catalog(RECIPES)
    assert len(catalog.overlays) >= 40
    for name in catalog.overlays:
        recipe = resolve(catalog, name)
        assert recipe.applied[-1] == name
        assert list(recipe.validation) == [p for p in PHASES if p in recipe.validation]
        for constraint in recipe.constraints:
            assert constraint.source, f"{name}: {constraint.name} has no source"
        for component in recipe.components:
            assert component.version and component.source, f"{name}: {component.name}"


def test_real_catalog_covers_the_published_matrix() -> None:
    catalog = load_catalog(RECIPES)
    seen = {
        (e.spec.criteria.service, e.spec.criteria.accelerator) for e in catalog.overlays.values()
    }
    for service in ("eks", "aks", "gke", "oke", "any"):
        assert any(s == service for s, _ in seen), service
    for accelerator in ("h100", "h200", "gb200", "gb300", "a100", "l40s", "none"):
        assert any(a == accelerator for _, a in seen), accelerator
    recipe = resolve(catalog, "h100-eks-ubuntu-training")
    perf = {c.name: c.value for c in recipe.validation["performance"].constraints}
    assert perf["nccl-all-reduce-bw"] == ">= 300"


def test_cpu_recipes_pass_on_a_plain_linux_host() -> None:
    catalog = load_catalog(RECIPES)
    readings: dict[str, Reading] = {
        "OS.release.ID": "debian",
        "OS.sysctl./proc/sys/kernel/osrelease": "6.1.0-25-amd64",
        "CPU.info.cores": 4,
        "Memory.info.total-bytes": 8 * 2**30,
        "Container.docker.version": "26.1.5+dfsg1",
        "Slurm.cluster.version": "22.05.8",
        "accelerator-count": 0,
    }
    for name in ("cpu-linux-process", "cpu-docker", "cpu-slurm"):
        recipe = resolve(catalog, name)
        results = evaluate_constraints(recipe.constraints, readings)
        assert all(r.status == "passed" for r in results), (name, results)
        readiness = evaluate_constraints(recipe.validation["readiness"].constraints, readings)
        assert all(r.status == "passed" for r in readiness)
        assert {c.name for c in recipe.validation["readiness"].checks} == {
            "accelerator-discovery",
            "cpu-smoke",
        }
