"""Shared by the bundle tests: render a bundle through the CLI, read its YAML objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cairn.cli.main import main

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
TRAINING = "h100-eks-ubuntu-training"
INFERENCE = "h100-eks-ubuntu-inference-dynamo"
REPO_URL = "https://git.example.com/platform/gpu-clusters.git"


def cairn(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `cairn ARGS`; exit code, stdout, stderr."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def render(capsys: pytest.CaptureFixture[str], out: Path, recipe: str, deployer: str,
           *extra: str, catalog: Path = RECIPES) -> Path:
    """`cairn bundle --recipe RECIPE --deployer DEPLOYER -o OUT`, which must succeed."""
    code, stdout, stderr = cairn(
        capsys, "bundle", "--recipe", recipe, "--deployer", deployer, "--out", str(out),
        "--catalog", str(catalog), "--repo-url", REPO_URL, "--repo-path", "clusters/gpu",
        *extra)
    assert code == 0, (stdout, stderr)
    return out


def objects(root: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every YAML document under `root` that looks like a Kubernetes object, with its file."""
    found = []
    for path in sorted(root.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc:
                found.append((path.relative_to(root).as_posix(), doc))
    return found
