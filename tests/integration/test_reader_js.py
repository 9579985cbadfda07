"""An outside system in another language reads a study with a reader's kit, and only that.

The official NATS JavaScript client (`nats` from npm, locked in tests/js/package-lock.json)
runs tests/js/reader.mjs against a secure embedded federation, with nothing but the kit that
`cairn provision reader` wrote: TLS with the kit's CA, the .creds file plus its JWT as the
CONNECT token, its own inbox prefix, the stream named in kit.yaml, a consumer under one of
its own names. It must see a real job's events in order, and the broker must refuse it
everything else.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cairn.client import Client
from cairn.events import StudyAdmin
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from tests.integration.cli_run import run_bounded
from tests.integration.cp_helpers import study_events, write_job

JS_DIR = Path(__file__).resolve().parents[1] / "js"
SCRIPT = JS_DIR / "reader.mjs"
NODE_TIMEOUT_S = 60.0


def _installed_as_locked() -> bool:
    """Whether node_modules holds every package of the lock, at its locked version."""
    lock = json.loads((JS_DIR / "package-lock.json").read_text())
    for path, entry in lock["packages"].items():
        if not path:
            continue  # the test folder itself
        try:
            manifest = json.loads((JS_DIR / path / "package.json").read_text())
        except (OSError, ValueError):
            return False
        if manifest.get("version") != entry.get("version"):
            return False
    return True


@pytest.fixture(scope="session")
def node() -> str:
    """`node`, with tests/js's locked packages installed (`npm ci` when they are not)."""
    node_bin, npm_bin = shutil.which("node"), shutil.which("npm")
    if node_bin is None or npm_bin is None:
        pytest.skip("Node.js and npm are needed for the JavaScript reader test: "
                    "apt-get install nodejs npm (.ci/run installs them)")
    # Several test processes may start at once: one installs, the others wait for it.
    with open(JS_DIR / ".npm-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _installed_as_locked():
            done = subprocess.run([npm_bin, "ci", "--no-audit", "--no-fund",
                                   "--loglevel=error"], cwd=JS_DIR, capture_output=True,
                                  text=True, timeout=300)
            if done.returncode != 0:
                # Not a skip: CI installs npm, so a failed install is a broken setup.
                pytest.fail(f"npm ci in {JS_DIR} failed ({done.returncode}):\n"
                            f"{done.stdout}\n{done.stderr}")
    return node_bin


async def _run(*args: str | Path, timeout: float = NODE_TIMEOUT_S) -> tuple[int, str, str]:
    return await run_bounded(*args, timeout_s=timeout)


async def _provision_reader(fed: EmbeddedFederation, name: str, *, data: bool = False
                            ) -> Path:
    """`cairn provision reader` as the federation's operator runs it; returns the kit."""
    assert fed.trust is not None
    rc, out, err = await _run(sys.executable, "-m", "cairn", "provision", "reader", name,
                              "--study", "demo", *(["--data"] if data else []),
                              "--root", fed.trust.dir, "-o", "json")
    assert rc == 0, err
    return Path(json.loads(out)["kit"])


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


async def _probe(node: str, kit: Path, tmp: Path, probes: list[dict[str, Any]]
                 ) -> dict[str, dict[str, Any]]:
    """Each probe's verdict from the JavaScript client, by the probe's label."""
    path = tmp / f"probes-{kit.name}.json"
    path.write_text(json.dumps([{k: v for k, v in p.items() if k != "label"}
                                for p in probes]))
    rc, out, err = await _run(node, SCRIPT, kit, "try", path)
    assert rc == 0, err
    results = _lines(out)
    assert len(results) == len(probes), out + err
    return {p["label"]: r for p, r in zip(probes, results, strict=True)}


async def _completed_job(client: Client, job_dir: Path) -> str:
    job = await client.submit(write_job(job_dir))
    final = await client.wait(job, timeout=60)
    assert final.state == "completed", final
    return job


@pytest.mark.timeout(240)
async def test_a_javascript_reader_reads_a_jobs_events_in_order_and_nothing_else(
        federation: EmbeddedFederation, client: Client, job_dir: Path, node: str,
        tmp_path: Path) -> None:
    fed = federation
    # Another study, with a stored event, that the reader must not see.
    await client.study_create("other", ["site-a"], [StudyAdmin(name=DEFAULT_ADMIN,
                                                               org="coord", role="lead")])
    reader = await _provision_reader(fed, "dashboard@org-a")
    data_reader = await _provision_reader(fed, "warehouse@org-a", data=True)
    kit = yaml.safe_load((reader / "kit.yaml").read_text())
    assert [s["name"] for s in kit["streams"]] == ["STUDY_demo"]
    job = await _completed_job(client, job_dir)

    rc, out, err = await _run(node, SCRIPT, reader, "events", "--job", job)
    assert rc == 0, err
    lines = _lines(out)
    streams = [x for x in lines if x["kind"] == "stream"]
    assert [s["name"] for s in streams] == ["STUDY_demo"] and streams[0]["messages"] > 0
    consumer = next(x for x in lines if x["kind"] == "consumer")
    assert consumer["name"] in kit["consumer_names"]
    seen = [x for x in lines if x["kind"] == "event"]
    # Exactly the job's stored events, in stream order, as Cairn's own replay reads them.
    stored = await study_events(fed, job=job)
    assert [e["id"] for e in seen] == [e.id for e in stored]
    assert [e["seq"] for e in seen] == sorted(e["seq"] for e in seen)
    types = [e["type"] for e in seen]
    assert types[0] == "job.submitted" and types[-1] == "job.completed", types
    lifecycle = [t for t in types if t.startswith("job.")]
    assert lifecycle == ["job.submitted", "job.dispatched", "job.running", "job.completed"]
    assert types.count("worker.exited") == 2
    assert {e["job"] for e in seen} == {job}
    assert {e["content_type"] for e in seen} == {"application/json"}

    other_owner = yaml.safe_load((data_reader / "kit.yaml").read_text())["consumer_owner"]
    forged = f"cairn.study.demo.job.{job}.completed"
    probes = [
        {"label": "own consumer", "op": "consume", "stream": "STUDY_demo"},
        {"label": "stream info", "op": "info", "stream": "STUDY_demo"},
        {"label": "forge an event", "op": "publish", "subject": forged,
         "body": {"type": "job.completed", "study": "demo", "job": job}},
        {"label": "ask the coordinator", "op": "publish",
         "subject": "cairn.api.study.demo.jobs"},
        {"label": "other study: consumer", "op": "consume", "stream": "STUDY_other"},
        {"label": "other study: info", "op": "info", "stream": "STUDY_other"},
        {"label": "other study: live", "op": "subscribe", "subject": "cairn.study.other.>"},
        {"label": "the coordinator's name", "op": "consume", "stream": "STUDY_demo",
         "name": "coordinator"},
        {"label": "another reader's name", "op": "consume", "stream": "STUDY_demo",
         "name": f"{other_owner}_0"},
        {"label": "data plane: consumer", "op": "consume", "stream": "DATA_demo"},
        {"label": "job files: consumer", "op": "consume", "stream": "FILES_demo"},
        {"label": "data plane: live", "op": "subscribe", "subject": "cairn.data.demo.>"},
        {"label": "list streams", "op": "list"},
    ]
    verdicts = await _probe(node, reader, tmp_path, probes)
    allowed = {label for label, v in verdicts.items() if v["allowed"]}
    assert allowed == {"own consumer", "stream info"}, verdicts
    refused = {label for label, v in verdicts.items() if v["refused"]}
    assert refused == set(verdicts) - allowed, verdicts
    # The refused forgery left nothing in the stream.
    assert [e.id for e in await study_events(fed, job=job)] == [e["id"] for e in seen]

    # With --data, the data plane and job files too; still no other study, no writes.
    verdicts = await _probe(node, data_reader, tmp_path, [
        {"label": "data plane: consumer", "op": "consume", "stream": "DATA_demo"},
        {"label": "job files: consumer", "op": "consume", "stream": "FILES_demo"},
        {"label": "other study: consumer", "op": "consume", "stream": "STUDY_other"},
        {"label": "write the data plane", "op": "publish",
         "subject": f"cairn.data.demo.{job}.all.x"},
    ])
    assert {k: v["allowed"] for k, v in verdicts.items()} == {
        "data plane: consumer": True, "job files: consumer": True,
        "other study: consumer": False, "write the data plane": False}, verdicts

