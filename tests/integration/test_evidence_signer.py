"""The signer in an embedded federation: a validation run becomes a signed bundle in the
`evidence` store, announced on EVIDENCE, verifiable offline, shown by `cairn evidence status`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import subjects
from cairn.events import EvidenceRecorded
from cairn.evidence import bundle as bundles
from cairn.evidence.keys import SigningKey
from cairn.evidence.store import recorded
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from tests.fixtures import evidence as ev
from tests.fixtures.federation import make_federation, started

RECIPE = "cpu-linux-process"


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFederation]:
    with started(make_federation(tmp_path_factory.mktemp("evidence"))) as federation:
        yield federation


async def cairn(fed: EmbeddedFederation, *args: str) -> tuple[int, str, str]:
    assert fed.nats is not None
    env = {**os.environ, "CAIRN_NATS_URL": fed.nats.url, "CAIRN_ACTOR": DEFAULT_ADMIN,
           **fed.client_env(),
           "CAIRN_TRUST": str(fed.trust_file), "COLUMNS": "300"}
    env.pop("CAIRN_CONTEXT", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cairn", *args, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def wait_evidence(fed: EmbeddedFederation, site: str, run: str,
                        timeout: float = 60.0) -> EvidenceRecorded:
    assert fed.nats is not None
    bus = await fed.bus()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in await recorded(bus, site, RECIPE):
                if event.run == run:
                    return event
            await asyncio.sleep(0.2)
    finally:
        await bus.close()
    raise AssertionError(f"no evidence for run {run} within {timeout}s")


async def test_a_validation_run_becomes_signed_verifiable_evidence(
        fed: EmbeddedFederation, tmp_path: Path) -> None:
    code, out, err = await cairn(fed, "validate", "--site", "site-a", "--recipe", RECIPE,
                                 "-o", "json")
    assert code == 0, out + err
    run = json.loads(out)["run"]
    event = await wait_evidence(fed, "site-a", run)
    assert event.result == "PASSED" and event.origin == "signer"
    assert event.source == f"signer@{fed.hub}"

    code, out, err = await cairn(fed, "evidence", "verify", "--site", "site-a", "--recipe",
                                 RECIPE, "-o", "json")
    assert code == 0, out + err
    result = json.loads(out)
    assert result["valid"] and result["signers"][0]["name"] == "federation"
    assert all(c["passed"] for c in result["checks"])

    code, out, err = await cairn(fed, "evidence", "status", "-o", "json")
    assert code == 0, err
    [row] = [r for r in json.loads(out) if r["site"] == "site-a"]
    assert row["eligible"] and row["reason"] == "eligible" and row["evidence"] == event.bundle
    code, out, err = await cairn(fed, "evidence", "status", "--recipe", RECIPE, "-o", "json")
    assert code == 0, err
    reasons = {r["site"]: r["reason"] for r in json.loads(out)}
    assert reasons == {"hub": "no-evidence", "site-a": "eligible", "site-b": "no-evidence"}

    code, out, err = await cairn(fed, "recipe", "show", RECIPE, "--federation", "-o", "json")
    assert code == 0, err
    found = json.loads(out)["evidence"]
    assert found["state"] == "SINGLE" and found["signers"] == ["federation"]
    assert found["hardware"] and found["attestations"][0]["site"] == "site-a"


async def test_the_evidence_stream_denies_delete_and_purge(fed: EmbeddedFederation) -> None:
    assert fed.nats is not None
    bus = await fed.bus()
    try:
        await bus.ensure(subjects.EVIDENCE_STREAM)
        info = await bus.js.stream_info(subjects.EVIDENCE_STREAM.name)
        assert info.config.deny_delete and info.config.deny_purge
    finally:
        await bus.close()


async def test_a_submitted_bundle_is_stored_but_counts_only_when_trusted(
        fed: EmbeddedFederation, tmp_path: Path) -> None:
    contributor = SigningKey.generate()
    files = ev.bundle("site-b", [contributor])
    bundles.write_dir(files, tmp_path / "mine")
    code, out, err = await cairn(fed, "evidence", "submit", str(tmp_path / "mine"), "-o", "json")
    assert code == 0, out + err
    answer = json.loads(out)
    assert answer["bundle"] == bundles.bundle_digest(files) and answer["trusted"] is False
    code, out, _ = await cairn(fed, "evidence", "status", "--site", "site-b", "-o", "json")
    [row] = json.loads(out)
    assert row["reason"] == "untrusted-signer"

    broken = {**files, "extra.txt": b"hello"}
    bundles.write_dir(broken, tmp_path / "broken")
    code, _, err = await cairn(fed, "evidence", "submit", str(tmp_path / "broken"))
    assert code == 9 and "unlisted-file" in err  # tampered: does not verify


async def test_garbage_submissions_are_refused_and_the_signer_keeps_running(
        fed: EmbeddedFederation) -> None:
    bus = await fed.bus(kit=DEFAULT_ADMIN)  # evidence is submitted by a project admin
    try:
        for body in (b"", b"not a tarball", bundles.pack({"attestation.dsse.json": b"{"})):
            reply = json.loads(await bus.request(
                subjects.api_validation("evidence-submit"), body, timeout=30))
            assert reply["ok"] is False and reply["error"]["code"] == "invalid", reply
        health = json.loads(await bus.request(subjects.health("signer", fed.hub), b"",
                                              timeout=5))
        assert health["ready"]
    finally:
        await bus.close()
