"""The fenced blocks of docs/*.md, and which of them are run.

The convention (docs/README.md says it to writers too):

- every fenced block names what it holds: `sh`, `python`, `yaml`, `json` or `text` (output,
  a synopsis with placeholders, a file layout), so a command cannot go untested by being
  left unlabelled;
- `sh` and `python` blocks are run, in page order, one page at a time, against a real secure
  embedded federation (tests/integration/test_docs_snippets.py); a block that cannot run
  there starts with a line `# not run: <why>`, and the why is not optional;
- `yaml` and `json` blocks must parse (`...` stands for what is left out).

docs/cli.md is generated from the commands' help (`make cli-docs`): its blocks are the
commands' synopses, checked by tests/unit/test_cli_docs.py, not here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
GENERATED = ("cli.md",)
KINDS = ("sh", "python", "yaml", "json", "text", "js")
"""`js`: a JavaScript client; run by the test of its own page (test_reader_docs.py)."""
RUNNABLE = ("sh", "python")
NOT_RUN = re.compile(r"#\s*not run\b:?\s*(.*)")
_FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")


@dataclass(frozen=True)
class Fence:
    """One fenced block of a page."""

    page: Path
    line: int
    """The line of its opening fence (1-based)."""
    info: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO).as_posix()}:{self.line}"

    @property
    def kind(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def not_run(self) -> str | None:
        """The reason its first line gives for not running it, if it says so ("" for a
        `# not run` that gives none)."""
        first = self.body.split("\n", 1)[0].strip()
        match = NOT_RUN.fullmatch(first)
        return match.group(1).strip() if match else None

    @property
    def runs(self) -> bool:
        return self.kind in RUNNABLE and self.not_run is None


def pages() -> list[Path]:
    """Every page under docs/ whose blocks are held to the convention."""
    return sorted(p for p in DOCS.rglob("*.md") if p.name not in GENERATED
                  or p.parent != DOCS)


def fences(page: Path) -> list[Fence]:
    """The fenced blocks of `page`, in order. An unclosed fence is one that runs to the end
    of the page (as CommonMark reads it)."""
    out: list[Fence] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        marker, info = opened.group(1), opened.group(2).strip()
        j = i + 1
        while j < len(lines) and not (lines[j].startswith(marker)
                                      and not lines[j].strip(marker[0]).strip()):
            j += 1
        out.append(Fence(page, i + 1, info, "\n".join(lines[i + 1:j])))
        i = j + 1
    return out
