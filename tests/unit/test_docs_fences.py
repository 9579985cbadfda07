"""Every fenced block in docs/ says what it holds, so none is left out of the snippet test by
omission; a block kept from running says why; YAML and JSON blocks parse. The pages (and the
README) name only files the repository has, and never install Cairn from PyPI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.docs_snippets import KINDS, REPO, RUNNABLE, Fence, fences, pages

ALL = [f for page in pages() for f in fences(page)]


def test_the_pages_have_blocks_and_some_run() -> None:
    assert len(pages()) > 10 and len(ALL) > 50
    assert sum(f.runs for f in ALL) > 10


@pytest.mark.parametrize("fence", ALL, ids=lambda f: f.where)
def test_every_block_names_its_kind(fence: Fence) -> None:
    assert fence.kind in KINDS, (
        f"{fence.where}: a fenced block needs one of {', '.join(KINDS)} after its ``` "
        f"(not {fence.info!r}); sh and python blocks are run by "
        "tests/integration/test_docs_snippets.py")


@pytest.mark.parametrize("fence", [f for f in ALL if f.not_run is not None],
                         ids=lambda f: f.where)
def test_a_block_that_is_not_run_says_why(fence: Fence) -> None:
    assert fence.kind in RUNNABLE, f"{fence.where}: only sh and python blocks are run"
    assert fence.not_run and len(fence.not_run) > 10, (
        f"{fence.where}: `# not run:` needs its reason")


@pytest.mark.parametrize("fence", [f for f in ALL if f.kind in ("yaml", "json")],
                         ids=lambda f: f.where)
def test_yaml_and_json_blocks_parse(fence: Fence) -> None:
    text = fence.body.replace("...", "") if fence.kind == "json" else fence.body
    try:
        if fence.kind == "yaml":
            list(yaml.safe_load_all(text))
        else:
            json.loads(text)
    except (yaml.YAMLError, ValueError) as exc:
        raise AssertionError(f"{fence.where}: {fence.kind} does not parse: {exc}") from None


PAGES_AND_README = [*pages(), REPO / "README.md"]
# A repository path as the pages write it: in a link, or as `code` naming a file.
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_PATH = re.compile(r"(?<![\w./-])((?:tests|tools|deploy|libs|services|examples|schemas|recipes"
                   r"|docs)/[\w./*<>-]*[\w*>])")
_TOP_DOC = re.compile(r"\b([A-Z][A-Z_-]+\.md)\b")  # DESIGN.md, README.md: at the top or in docs/
_PYPI_CAIRN = re.compile(r"pip install\s+(?:-\S+\s+)*['\"]?cairn(?:\[[^\]]*\])?['\"]?(?=\s|$|`)")


@pytest.mark.parametrize("page", PAGES_AND_README, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_file_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = []
    for target in _LINK.findall(text):
        if "://" in target or target.startswith("mailto:") or set(target) & set("[{^$"):
            continue
        if not (page.parent / target).exists():
            missing.append(target)
    for path in _PATH.findall(text):
        if any(c in path for c in "*<>") or path.endswith("/") or re.search(r"/[A-Z]+\b", path):
            continue  # a pattern or placeholder (`test_worker_image*.py`, `evidence/NAME`)
        if not (REPO / path).exists() and not (REPO / path.rstrip(".")).exists():
            missing.append(path)
    for name in _TOP_DOC.findall(text):
        if not any((folder / name).exists() for folder in (REPO, REPO / "docs", page.parent)):
            missing.append(name)
    assert not missing, f"{page.relative_to(REPO)} names what the repository lacks: {missing}"


@pytest.mark.parametrize("page", PAGES_AND_README, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_install_line_takes_cairn_from_pypi(page: Path) -> None:
    # PyPI's `cairn` is an unrelated project: Cairn installs from a checkout or its wheel.
    lines = [line for line in page.read_text(encoding="utf-8").splitlines()
             if _PYPI_CAIRN.search(line)]
    assert not lines, lines
