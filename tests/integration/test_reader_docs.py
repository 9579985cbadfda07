"""docs/events.md's snippets, run as written against a secure federation laid out as
`cairn up` lays it out (`.cairn/trust` in the working folder): the shell quick start, the
JavaScript reader, the Python reader and the data reader."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from cairn.client import Client
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.cli_run import run_bounded
from tests.integration.cp_helpers import write_job
from tests.integration.test_reader_js import JS_DIR, node

__all__ = ["node"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"
RUN_TIMEOUT_S = 90.0

DATA_JOB = """\
from pathlib import Path

from cairn.worker import Worker, main


async def run(w: Worker) -> None:
    await w.broadcast("hello", {"from": w.site})
    Path("out.txt").write_text(f"made at {w.site}")
    await w.result({"ok": True}, files=["out.txt"])

main(run)
"""


def snippet(name: str) -> tuple[str, str]:
    """(language, code) of the block docs/events.md marks `<!-- snippet: NAME -->`."""
    match = re.search(rf"<!-- snippet: {re.escape(name)} -->\n```(\w+)\n(.*?)```\n",
                      DOC.read_text(), re.S)
    assert match, f"docs/events.md has no snippet {name}"
    return match.group(1), match.group(2)


async def _run(cwd: Path, *args: str | Path) -> str:
    # Only what a user's shell would have: no credential or context of the test's own.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    code, out, err = await run_bounded(*args, cwd=cwd, env=env, timeout_s=RUN_TIMEOUT_S)
    assert code == 0, f"{args}: exit {code}\n{err}"
    return out


@pytest.mark.timeout(300)
async def test_the_events_guide_snippets_run_as_written(
        federation: EmbeddedFederation, client: Client, job_dir: Path, node: str,
        tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / ".cairn").symlink_to(federation.dir.resolve(), target_is_directory=True)
    (work / "node_modules").symlink_to(JS_DIR / "node_modules", target_is_directory=True)

    lang, code = snippet("reader-kit")
    assert lang == "sh"
    out = await _run(work, "bash", "-euo", "pipefail", "-c", code)
    assert "reader dashboard@org-a (new)" in out and "created" in out, out
    assert json.loads((work / "demo-state.json").read_text())["state"]["study"]["name"] == \
        "demo"
    await _run(work, sys.executable, "-m", "cairn", "provision", "reader", "lake@org-a",
               "--study", "demo", "--data", "--root", ".cairn/trust")

    job = await client.submit(write_job(job_dir, script=DATA_JOB))
    assert (await client.wait(job, timeout=60)).state == "completed"

    lang, code = snippet("reader-js")
    assert lang == "js"
    (work / "read-study.mjs").write_text(code)
    lines = [json.loads(x) for x in (await _run(work, node, "read-study.mjs", job)).splitlines()]
    types = [x["event"]["type"] for x in lines]
    assert types[0] == "job.submitted" and types[-1] == "job.completed", types
    assert types.count("worker.result") == 2
    assert [x["seq"] for x in lines] == sorted(x["seq"] for x in lines)
    everything = (await _run(work, node, "read-study.mjs")).splitlines()
    assert json.loads(everything[0])["event"]["type"] == "study.created"

    lang, code = snippet("reader-python")
    assert lang == "python"
    (work / "read-study.py").write_text(code)
    out = await _run(work, sys.executable, "read-study.py")
    assert f"cairn.study.demo.job.{job}.completed job.completed" in out, out

    lang, code = snippet("data-reader-python")
    assert lang == "python"
    (work / "read-job-data.py").write_text(code)
    out = (await _run(work, sys.executable, "read-job-data.py", job)).splitlines()
    data = [line for line in out if line.startswith("data ")]
    files = [line for line in out if line.startswith("file ")]
    assert len(data) == 2 and all("hello" in line for line in data), out
    assert sorted(files) == sorted(f"file out.txt {len(f'made at {s}')} b'made at {s}'"
                                   for s in ("site-a", "site-b")), out
