"""What counts as a break of a public surface, and when a break is allowed.

A surface (the CLI, `cairn.client`, the data plane, the bundle layouts) is described as a tree
of JSON values: objects whose keys name things a user relies on (a command, a flag, a file),
and leaves that say what each thing is (a type, a default, a kind of file). Against the
baseline of the last release:

- a key that is gone is a break (a command, flag, function, file or field removed);
- a leaf that differs is a break (a default, a type, an exit code changed), except a
  relaxation (`RELAXATIONS`): `required` going from true to false, say;
- a new key is an addition, allowed, unless what it adds is `required` (a new required flag or
  parameter breaks every caller written against the baseline);
- a subtree marked `"experimental": true` in the baseline is not held to any of this.

A break passes only when the major version (semver) is higher than the baseline's: that is
what a major release is for (docs/compatibility.md). JSON Schemas inside a description (the
`-o json` outputs, a bundle's manifest) are compared by the event schemas' rules instead
(`tools/check_schemas.py`).
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

EXPERIMENTAL = "experimental"
UNTYPED = "untyped (experimental)"
RELAXATIONS: dict[str, set[tuple[Any, Any]]] = {
    "required": {(True, False)},
    "json_output": {(UNTYPED, "typed")},
    "kind": {("keyword-only", "positional or keyword"),
             ("positional-only", "positional or keyword")},
}
"""Leaves whose change from the first value to the second loosens the contract: a required
flag that becomes optional, a command whose `-o json` output becomes typed, a keyword-only
parameter that may now be passed by position too."""


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def breaks(surface: str, baseline: Any, current: Any, path: tuple[str, ...] = ()) -> list[str]:
    """One line per break of `baseline` in `current`, each naming the surface and the path."""
    if isinstance(baseline, dict) and isinstance(current, dict):
        if baseline.get(EXPERIMENTAL) is True:
            return []
        problems = []
        for key, before in baseline.items():
            if key not in current:
                problems.append(f"INCOMPATIBLE {surface}: {_where((*path, key))} removed")
            else:
                problems += breaks(surface, before, current[key], (*path, key))
        for key, after in current.items():
            if key not in baseline and isinstance(after, dict) and after.get("required") is True:
                problems.append(f"INCOMPATIBLE {surface}: {_where((*path, key))} is new and "
                                "required (callers of the last release do not pass it)")
        return problems
    if baseline == current or (
            path and (baseline, current) in RELAXATIONS.get(path[-1], set())):
        return []
    return [f"INCOMPATIBLE {surface}: {_where(path)} changed from {_show(baseline)} to "
            f"{_show(current)}"]


def _where(path: tuple[str, ...]) -> str:
    return " / ".join(path) if path else "(the whole surface)"


def additions(baseline: Any, current: Any) -> int:
    """How many keys `current` has that `baseline` has not (anywhere in the tree)."""
    if not (isinstance(baseline, dict) and isinstance(current, dict)):
        return 0
    return sum(1 if key not in baseline else additions(baseline[key], value)
               for key, value in current.items())


_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def major(version: str) -> int:
    """The major number of a semver version (`1.4.0` -> 1).

    Raises:
        ValueError: not a version.
    """
    found = _SEMVER.match(version.strip())
    if found is None:
        raise ValueError(f"{version!r} is not a version (MAJOR.MINOR.PATCH)")
    return int(found.group(1))


def project_version(pyproject: Path = REPO / "pyproject.toml") -> str:
    """The version this checkout is (pyproject.toml's `project.version`)."""
    return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"])


def version_from_pyproject_text(text: str) -> str:
    return str(tomllib.loads(text)["project"]["version"])


def break_permitted(baseline_version: str, current_version: str) -> bool:
    """Whether a break is allowed: only by a release with a higher major version."""
    return major(current_version) > major(baseline_version)


def verdict(problems: list[str], baseline_version: str, current_version: str,
            label: str) -> tuple[int, list[str]]:
    """(exit code, lines) once the breaks against a baseline are known."""
    if not problems:
        return 0, []
    if break_permitted(baseline_version, current_version):
        return 0, [f"{label}: {len(problems)} breaking change(s) permitted: version "
                   f"{current_version} is a new major release after {baseline_version}",
                   *(f"  {line}" for line in problems)]
    return 1, [*problems, f"{label}: breaking changes need a new major version (this is "
               f"{current_version}, the baseline {baseline_version}); see "
               "docs/compatibility.md"]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=False, timeout=60)
    if done.returncode != 0:
        raise LookupError(done.stderr.strip().splitlines()[-1] if done.stderr.strip()
                          else f"git {' '.join(args)} failed")
    return done.stdout


def read_git_folder(repo: Path, rev: str, folder: str,
                    keep: Callable[[str], bool]) -> dict[str, str]:
    """The files under `folder/` as committed at `rev` in the git repository `repo`, by path
    inside that folder, those `keep` accepts.

    Raises:
        LookupError: not a repository, an unknown revision, or no such files there.
    """
    prefix = folder.rstrip("/") + "/"
    commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    names = _git(repo, "ls-tree", "-r", "--name-only", commit, "--", prefix).splitlines()
    files = {name[len(prefix):]: name for name in names if keep(name[len(prefix):])}
    if not files:
        raise LookupError(f"{rev} has no {prefix}")
    return {rel: _git(repo, "show", f"{commit}:{path}") for rel, path in files.items()}


def version_at(repo: Path, rev: str) -> str | None:
    """The version pyproject.toml says at the git revision `rev`, None where it cannot tell."""
    try:
        return version_from_pyproject_text(_git(repo, "show", f"{rev}:pyproject.toml"))
    except (LookupError, KeyError, ValueError, tomllib.TOMLDecodeError):
        return None
