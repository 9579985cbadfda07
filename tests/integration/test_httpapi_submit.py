"""A submit with its code through the HTTP API (`cairn.httpapi.submit`): the caller's signed
envelope and the bundle it names, in one multipart request; the API stores the bundle only
for the caller's own signature over its digest, and adds no authority of its own."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from cairn.bus import objects
from cairn.cli.main import cli
from cairn.errors import NotFound
from cairn.trust.credentials import API_NAME
from tests.fixtures.api import LEADS, ApiFederation
from tests.integration.cp_helpers import write_job

ALICE, BOB = LEADS["alpha"], LEADS["beta"]
QUICK = "print('submitted over http')\n"


def _signed(api_fed: ApiFederation, who: str, spec: Path, study: str,
            bundle: Path) -> bytes:
    done = CliRunner().invoke(cli, ["api", "sign-submit", str(spec), "--study", study,
                                    "--bundle", str(bundle), "--creds",
                                    str(api_fed.creds(who))])
    assert done.exit_code == 0, done.output
    return done.stdout_bytes


def _post(api_fed: ApiFederation, who: str, study: str, envelope: bytes,
          bundle: bytes) -> tuple[int, dict[str, object]]:
    with api_fed.http(who) as http:
        answer = http.post(f"/v1/studies/{study}/submit",
                           files={"envelope": ("submit.json", envelope, "application/json"),
                                  "bundle": ("code.tar", bundle, "application/octet-stream")})
    return answer.status_code, answer.json()


async def _stored(api_fed: ApiFederation, study: str, digest: str) -> bool:
    admin = await api_fed.client("admin@coord", study)
    try:
        await (await objects(admin._bus, f"artifacts_{study}")).get(digest)
        return True
    except NotFound:
        return False
    finally:
        await admin.close()


async def test_a_job_and_its_code_in_one_request_runs(api_federation: ApiFederation,
                                                      tmp_path: Path) -> None:
    spec = write_job(tmp_path / "job", name="over-http", script=QUICK)
    envelope = _signed(api_federation, ALICE, spec, "alpha", tmp_path / "code.tar")
    status, reply = _post(api_federation, ALICE, "alpha", envelope,
                          (tmp_path / "code.tar").read_bytes())
    assert status == 200 and reply["ok"] is True, reply
    job = reply["result"]["job"]  # type: ignore[index]
    alice = await api_federation.client(ALICE, "alpha")
    try:
        final = await alice.wait(job, timeout=90)
    finally:
        await alice.close()
    assert final.state == "completed", final  # its code was there for the launcher


async def test_only_the_callers_own_signature_over_the_bundle_stores_it(
        api_federation: ApiFederation, tmp_path: Path) -> None:
    spec = write_job(tmp_path / "job", name="refused", script="print('never stored')\n")
    envelope = _signed(api_federation, ALICE, spec, "alpha", tmp_path / "code.tar")
    bundle = (tmp_path / "code.tar").read_bytes()
    digest = hashlib.sha256(bundle).hexdigest()
    # Other bytes than the digest signed: refused, nothing stored.
    status, reply = _post(api_federation, ALICE, "alpha", envelope, bundle + b"\0")
    assert status == 400 and reply["field"] == "bundle", reply
    # Alice's envelope sent with bob's token: not his to send.
    status, reply = _post(api_federation, BOB, "alpha", envelope, bundle)
    assert status == 403 and "signed by alice@org-a" in str(reply["message"]), reply
    # Bob's own, for a study he may not write code into.
    bobs = _signed(api_federation, BOB, spec, "alpha", tmp_path / "bob.tar")
    status, reply = _post(api_federation, BOB, "alpha", bobs, bundle)
    assert status == 403 and "may not store code bundles" in str(reply["message"]), reply
    # The API's own credential signs nothing it may send.
    api_signed = _signed(api_federation, API_NAME, spec, "alpha", tmp_path / "api.tar")
    status, reply = _post(api_federation, API_NAME, "alpha", api_signed, bundle)
    assert status == 403 and "may not make admin requests" in str(reply["message"]), reply
    assert not await _stored(api_federation, "alpha", digest)


@pytest.mark.parametrize("part", ["envelope", "bundle"])
def test_a_form_without_a_part_is_one_400(api_federation: ApiFederation, part: str) -> None:
    with api_federation.http(ALICE) as http:
        others = {"envelope": ("e.json", b"{}", "application/json"),
                  "bundle": ("b.tar", b"x", "application/octet-stream")}
        del others[part]
        answer = http.post("/v1/studies/alpha/submit", files=others)
    assert answer.status_code == 400, answer.text
    assert set(answer.json()) == {"status", "code", "message", "field"}
