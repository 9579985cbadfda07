"""`cairn job new NAME --template T`: a job folder that submits as it is.

The templates are data (`job_templates.yaml` beside this module): per template a description
and its files, with `__NAME__` standing for the job's name.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

import yaml

from cairn.errors import Conflict
from cairn.names import check_name

PLACEHOLDER = "__NAME__"


@cache
def templates() -> dict[str, dict[str, object]]:
    """Template name -> {"description": str, "files": {path: text}}."""
    text = resources.files("cairn.cli").joinpath("job_templates.yaml").read_text("utf-8")
    # Read on every `cairn job` command (its help names them): libyaml takes 0.8 ms for it
    # here, the pure-Python loader 18 ms.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loaded: dict[str, dict[str, object]] = yaml.load(text, Loader=loader)  # noqa: S506
    return loaded


def template_names() -> tuple[str, ...]:
    return tuple(templates())


def describe() -> str:
    return "; ".join(f"{name}: {t['description']}" for name, t in templates().items())


def write_job(name: str, template: str, folder: Path) -> list[Path]:
    """Write template `template` for job `name` into `folder` (new, or empty); the paths.

    Raises:
        InvalidName: `name` breaks the name rule (it becomes the job's name).
        Conflict: `folder` exists and is not empty (nothing is written).
    """
    check_name(name, "job")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise Conflict(f"{folder} exists and is not empty: choose another NAME or --dir",
                       file=str(folder))
    files = templates()[template]["files"]
    assert isinstance(files, dict)
    written = []
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(text).replace(PLACEHOLDER, name), encoding="utf-8")
        written.append(path)
    return written
