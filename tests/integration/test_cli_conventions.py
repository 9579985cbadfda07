"""The CLI's conventions on a real secure federation, as a user meets them: job ids by any
unique prefix, tables at 80 columns that keep every id, `--set` params recorded in the job's
event, each `cairn job new` template submitted and run, an empty log that says why, and a
gated job's receipts (the hub's role not gated) with the study from the context file.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cairn.evidence.store import recorded
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from tests.fixtures.federation import make_federation, started
from tests.integration.cli_run import run_bounded
from tests.integration.cp_helpers import write_job

RECIPE = "cpu-linux-process"
TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFederation]:
    with started(make_federation(tmp_path_factory.mktemp("conventions"))) as federation:
        yield federation


async def cairn(fed: EmbeddedFederation, *args: str, cwd: Path | None = None,
                columns: int | None = None, context: bool = False) -> tuple[int, str, str]:
    """`cairn ARGS` as a user runs it: with the context file `cairn up` writes (`context`) or
    with $CAIRN_STUDY; off a terminal, at `columns` wide."""
    assert fed.nats is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.pop("COLUMNS", None)
    if context:
        env["CAIRN_CONTEXT"] = str(fed.write_context(fed.dir / "context-of-test.yaml"))
    else:
        env.update({"CAIRN_NATS_URL": fed.nats.url, "CAIRN_STUDY": "demo",
                    "CAIRN_ACTOR": DEFAULT_ADMIN, "CAIRN_TRUST": str(fed.trust_file),
                    "CAIRN_CONTEXT": str(fed.dir / "no-context.yaml"), **fed.client_env()})
    if columns:
        env["COLUMNS"] = str(columns)
    return await run_bounded(sys.executable, "-m", "cairn", *args, env=env, cwd=cwd,
                             timeout_s=TIMEOUT_S)


async def submit(fed: EmbeddedFederation, spec: Path, *extra: str) -> dict[str, object]:
    """Submit with `--watch -o json`: the final job state (exit 0 or 1 told apart by state)."""
    code, out, err = await cairn(fed, "job", "submit", str(spec), "--watch", "-o", "json",
                                 "--timeout", "180", *extra)
    assert code in (0, 1), out + err
    state: dict[str, object] = json.loads(out)
    return state


async def test_templates_run_ids_by_prefix_and_tables_keep_every_id(
        fed: EmbeddedFederation, tmp_path: Path) -> None:
    # Each template is written by `cairn job new` and submitted as it is.
    finals = {}
    for template in ("script", "fedavg", "pytorch"):
        name = f"new-{template}"
        code, out, err = await cairn(fed, "job", "new", name, "--template", template,
                                     "--dir", str(tmp_path))
        assert code == 0, out + err
        finals[template] = await submit(fed, tmp_path / name / "job.yaml")
    assert finals["script"]["state"] == "completed", finals["script"]
    assert finals["fedavg"]["state"] == "completed", finals["fedavg"]
    [server] = [r for r in finals["fedavg"]["results"] if r["role"] == "server"]  # type: ignore[attr-defined]
    assert len(server["value"]["accuracy"]) == 3 and server["files"][0]["name"] == "model.json"
    try:
        import torch  # noqa: F401
    except ImportError:
        # Without torch the clients exit at once, and their log says what is missing.
        pytorch = finals["pytorch"]
        assert pytorch["state"] == "failed", pytorch
        code, out, err = await cairn(fed, "job", "logs", str(pytorch["job"]), "--site", "site-a")
        assert code == 0 and "needs PyTorch" in out, out + err
    else:
        assert finals["pytorch"]["state"] == "completed", finals["pytorch"]

    ids = [str(f["job"]) for f in finals.values()]
    # At 80 columns, off a terminal, the table keeps every whole id (and name).
    code, out, err = await cairn(fed, "job", "list", columns=80)
    assert code == 0, err
    assert all(job_id in out for job_id in ids), out
    assert all(f"new-{t}" in out for t in finals), out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    code, wide, _ = await cairn(fed, "job", "list", "--wide", columns=80)
    assert code == 0 and "actor" in wide and "workers" in wide

    # The shortest prefix that names one job resolves; one that several share lists them.
    target = ids[0]
    prefix = next(target[:n] for n in range(3, len(target))
                  if sum(i.startswith(target[:n]) for i in ids) == 1)
    code, out, err = await cairn(fed, "job", "show", prefix, "-o", "json")
    assert code == 0 and json.loads(out)["job"] == target, err
    code, out, err = await cairn(fed, "job", "show", prefix.removeprefix("j-"), "-o", "json")
    assert code == 0 and json.loads(out)["job"] == target, err
    shared = next(ids[0][:n] for n in range(len(ids[0]), 0, -1)
                  if all(i.startswith(ids[0][:n]) for i in ids))
    code, _, err = await cairn(fed, "job", "show", shared)
    assert code == 3 and "ambiguous" in err, err
    assert all(job_id in err for job_id in ids), err
    code, _, err = await cairn(fed, "job", "show", "j-zzzz")
    assert code == 4 and "no job named 'j-zzzz'" in err

    # Results print as YAML in the table view, not as a Python repr.
    code, out, _ = await cairn(fed, "job", "show", str(finals["fedavg"]["job"]))
    assert code == 0
    shown = yaml.safe_load(out.split("results:\n", 1)[1])
    assert any(r["role"] == "server" and len(r["value"]["accuracy"]) == 3 for r in shown)


async def evidence_recorded(fed: EmbeddedFederation, site: str) -> None:
    """Wait until the signer has stored evidence of `site` (it does so just after the
    validation's result): a gated job submitted before would find none."""
    bus = await fed.bus()
    try:
        async with asyncio.timeout(60):
            while not await recorded(bus, site, RECIPE):
                await asyncio.sleep(0.2)
    finally:
        await bus.close()


async def test_set_is_typed_checked_and_recorded(fed: EmbeddedFederation,
                                                 tmp_path: Path) -> None:
    code, out, err = await cairn(fed, "job", "new", "params", "--dir", str(tmp_path))
    assert code == 0, err
    spec = tmp_path / "params" / "job.yaml"
    final = await submit(fed, spec, "--set", "params.steps=5")
    assert final["state"] == "completed", final
    # Typed: the event records the integer 5, and the worker ran five steps.
    assert final["spec"]["params"] == {"steps": 5}  # type: ignore[index]
    results = final["results"]
    assert results and all(r["value"]["steps"] == 5 and r["value"]["total"] == 15
                           for r in results), results  # type: ignore[union-attr]
    code, out, _ = await cairn(fed, "replay", "--job", str(final["job"]), "-o", "json")
    assert json.loads(out)["state"]["jobs"][final["job"]]["spec"]["params"]["steps"] == 5
    # Checked against the spec's params before anything is sent.
    code, _, err = await cairn(fed, "job", "submit", str(spec), "--set", "params.steps=five")
    assert code == 3 and "--set params.steps: 'five' is not an integer" in err, err
    code, _, err = await cairn(fed, "job", "submit", str(spec), "--set", "params.stepz=5")
    assert code == 3 and "declares no param 'stepz'" in err and "steps" in err, err


async def test_an_empty_log_says_why(fed: EmbeddedFederation, tmp_path: Path) -> None:
    spec = write_job(tmp_path / "quiet", name="quiet", script="")
    final = await submit(fed, spec)
    assert final["state"] == "completed", final
    code, out, err = await cairn(fed, "job", "logs", str(final["job"]))
    assert code == 0 and out == ""
    assert "wrote nothing to stdout or stderr" in err and f"cairn job show {final['job']}" in err
    code, out, err = await cairn(fed, "job", "logs", str(final["job"]), "--site", "nowhere")
    assert code == 0 and "no worker of job" in err and "ran at" in err


async def test_receipts_of_a_gated_job_hold_and_the_hub_role_is_not_gated(
        fed: EmbeddedFederation, tmp_path: Path) -> None:
    code, out, err = await cairn(fed, "validate", "--site", "site-a", "--recipe", RECIPE)
    assert code == 0, out + err
    roles = """\
        roles:
          server:
            entrypoint: python main.py
            resources: {cpus: 1, memory: 128Mi}
          client:
            entrypoint: python main.py
            resources: {cpus: 1, memory: 128Mi}
            sites: [site-a]
        """
    spec = write_job(tmp_path / "gated", name="gated", script="", roles=roles,
                     extra=f"requires: {{recipe: {RECIPE}}}\n")
    await evidence_recorded(fed, "site-a")
    final = await submit(fed, spec)
    assert final["state"] == "completed", final
    job_id = str(final["job"])
    # The study comes from the context file, as for every other command.
    code, out, err = await cairn(fed, "evidence", "receipts", job_id[:-4], "-o", "json",
                                 context=True)
    assert code == 0, out + err
    rows = {r["role"]: r for r in json.loads(out)}
    assert rows["server"]["status"] == "not-gated" and rows["server"]["gated"] is False
    assert rows["client"]["status"] == "verified" and rows["client"]["site"] == "site-a"

    # `recipe show` reads the federation's evidence when a context names one, and says so.
    code, out, err = await cairn(fed, "recipe", "show", RECIPE, "-o", "json", context=True)
    assert code == 0, err
    evidence = json.loads(out)["evidence"]
    sources = {s["source"]: s for s in evidence["sources"]}
    assert sources["federation"]["bundles"] >= 1 and "error" not in sources["federation"]
    assert evidence["state"] != "UNTESTED", evidence
