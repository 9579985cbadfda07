"""The HTTP API on a real secure federation (`tests/fixtures/api.py`): every read scoped by
the caller's own rights, writes only as the caller's signed envelope, live events over SSE,
hostile requests answered with one error JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import msgspec

from cairn import api
from cairn.events import JobCancelRequested
from cairn.trust.requests import RequestSigner
from tests.fixtures.api import EVIDENCED, LEADS, ApiFederation
from tests.integration.cp_helpers import study_events, write_job

HELD = """\
import time
time.sleep(120)
"""

ALICE, BOB = LEADS["alpha"], LEADS["beta"]


def _get_paths(api_fed: ApiFederation) -> list[str]:
    """Every GET path of the contract, filled with the alpha job, a site, a recipe."""
    with api_fed.http(ALICE) as http:
        doc = http.get("/openapi/openapi.json").json()
        recipe = http.get("/v1/recipes", params={"limit": 1}).json()["items"][0]["name"]
    fills = {"study": "alpha", "job": api_fed.jobs["alpha"], "site": "site-a",
             "name": recipe, "bundle": "0" * 64}
    paths = []
    for path, ops in doc["paths"].items():
        if "get" not in ops or path.endswith("/events"):
            continue
        for key, value in fills.items():
            path = path.replace("{" + key + "}", value)
        paths.append(path)
    return paths


def test_a_caller_of_study_a_sees_nothing_of_study_b(api_federation: ApiFederation) -> None:
    beta_job = api_federation.jobs["beta"]
    with api_federation.http(ALICE) as alice, api_federation.http(BOB) as bob:
        who = alice.get("/v1/whoami")
        assert who.status_code == 200, who.text
        assert who.json()["studies"] == ["alpha"]
        assert [s["name"] for s in alice.get("/v1/studies").json()["items"]] == ["alpha"]
        # Bob's study, its job, timeline, metrics and live events: as if they did not exist.
        for path in ("/v1/studies/beta", "/v1/studies/beta/jobs",
                     f"/v1/studies/beta/jobs/{beta_job}",
                     f"/v1/studies/beta/jobs/{beta_job}/timeline",
                     f"/v1/studies/beta/jobs/{beta_job}/metrics",
                     "/v1/studies/beta/timeline", "/v1/studies/beta/events"):
            answer = alice.get(path)
            assert answer.status_code == 404, (path, answer.text)
            assert answer.json()["code"] == "not-found"
        # Every GET of the contract answers alice with nothing of beta in it.
        for path in _get_paths(api_federation):
            body = alice.get(path).text
            for secret in ("beta", beta_job, "bob@org-b"):
                assert secret not in body, (path, secret)
        # ... while bob sees his own study and job, and the project admin both.
        jobs = bob.get("/v1/studies/beta/jobs").json()
        assert [j["job"] for j in jobs["items"]] == [beta_job]
    with api_federation.http("admin@coord") as admin:
        assert {"alpha", "beta"} <= set(admin.get("/v1/whoami").json()["studies"])


def test_job_state_timeline_and_metrics_as_folded(api_federation: ApiFederation) -> None:
    beta_job = api_federation.jobs["beta"]
    with api_federation.http(BOB) as bob:
        job = bob.get(f"/v1/studies/beta/jobs/{beta_job}").json()
        assert job["summary"]["state"] == "completed"
        assert [w["site"] for w in job["summary"]["workers"]] == ["site-b"]
        timeline = bob.get(f"/v1/studies/beta/jobs/{beta_job}/timeline").json()
        types = [e["type"] for e in timeline["items"]]
        assert types[0] == "job.submitted" and "job.completed" in types
        metrics = bob.get(f"/v1/studies/beta/jobs/{beta_job}/metrics").json()
        assert [(p["step"], p["values"]) for p in metrics["points"]] == [
            (1, {"accuracy": 0.9, "loss": 0.1})]
        page = bob.get("/v1/studies/beta/jobs", params={"state": "running"}).json()
        assert page["items"] == [] and page["total"] == 0


def test_a_recipes_evidence_status_and_the_catalogs_filters(
        api_federation: ApiFederation) -> None:
    with api_federation.http(ALICE) as alice:
        shown = alice.get(f"/v1/recipes/{EVIDENCED}").json()
        assert shown["status"] == "SINGLE" and shown["signers"] == ["federation"]
        page = alice.get("/v1/recipes", params={"status": "SINGLE"}).json()
        assert [r["name"] for r in page["items"]] == [EVIDENCED]
        h100 = alice.get("/v1/recipes", params={"accelerator": "h100", "limit": 500}).json()
        assert h100["total"] and all(r["criteria"]["accelerator"] == "h100"
                                     for r in h100["items"])
        assert all(r["status"] == "UNTESTED" for r in h100["items"])


def test_no_token_or_a_bad_one_is_401_with_one_error(api_federation: ApiFederation) -> None:
    with api_federation.http(None) as anon:
        answer = anon.get("/v1/studies")
        assert answer.status_code == 401 and answer.json()["field"] == "authorization"
        token = api_federation.token(ALICE)
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        answer = anon.get("/v1/studies", headers={"Authorization": f"Bearer {forged}"})
        assert answer.status_code == 401
        assert "signature" in answer.json()["message"]


def test_hostile_requests_get_a_status_and_one_error_json(
        api_federation: ApiFederation) -> None:
    with api_federation.http(ALICE) as alice:
        for path, params, status in (
                ("/v1/studies/alpha/jobs", {"limit": 100000}, 400),
                ("/v1/studies/alpha/jobs", {"offset": -1}, 400),
                ("/v1/studies/ALPHA.>", {}, 400),
                ("/v1/recipes", {"accelerator": "no-such-gpu"}, 400),
                ("/v1/nowhere", {}, 404)):
            answer = alice.get(path, params=params)
            assert answer.status_code == status, (path, answer.text)
            body = answer.json()
            assert body["status"] == status and body["message"]
            assert "Traceback" not in answer.text
        big = alice.post("/v1/studies/alpha/requests", content=b"{" * (2 * 1024 * 1024))
        assert big.status_code == 413 and big.json()["status"] == 413
        garbage = alice.post("/v1/studies/alpha/requests", content=b"\xff not json")
        assert garbage.status_code == 400 and garbage.json()["field"] == "body"


def _cancel(api_fed: ApiFederation, who: str, study: str, job: str) -> bytes:
    signer = RequestSigner.from_creds(api_fed.creds(who))
    return signer.sign(api.Envelope(request=api.JobCancel(job=job, reason="via http"),
                                    study=study))


def test_writes_are_the_callers_signed_envelope_and_nothing_more(
        api_federation: ApiFederation) -> None:
    beta_job = api_federation.jobs["beta"]
    with api_federation.http(ALICE) as alice:
        # Alice's own signature on a request for bob's study: the coordinator refuses it,
        # though the API's own connection could have asked anything.
        answer = alice.post("/v1/studies/beta/requests",
                            content=_cancel(api_federation, ALICE, "beta", beta_job))
        assert answer.status_code == 403, answer.text
        # A signed envelope changed in transit no longer verifies.
        signed = _cancel(api_federation, ALICE, "alpha", api_federation.jobs["alpha"])
        tampered = signed.replace(b"via http", b"via HTTP")
        answer = alice.post("/v1/studies/alpha/requests", content=tampered)
        assert answer.status_code == 403 and "signature" in answer.json()["error"]["message"]
        # Unsigned: refused before it is sent.
        unsigned = msgspec.json.encode(api.Envelope(
            request=api.JobCancel(job=api_federation.jobs["alpha"]), study="alpha"))
        answer = alice.post("/v1/studies/alpha/requests", content=unsigned)
        assert answer.status_code == 403 and answer.json()["field"] == "signature"
        # A read verb is not a write the API passes on.
        listing = RequestSigner.from_creds(api_federation.creds(ALICE)).sign(
            api.Envelope(request=api.JobList(), study="alpha"))
        answer = alice.post("/v1/studies/alpha/requests", content=listing)
        assert answer.status_code == 400 and answer.json()["field"] == "request.type"


async def test_a_signed_cancel_through_the_api_cancels_the_job(
        api_federation: ApiFederation, tmp_path: Path) -> None:
    alice = await api_federation.client(ALICE, "alpha")
    try:
        job = await alice.submit(write_job(tmp_path, name="to-cancel", script=HELD))
        with api_federation.http(ALICE) as http:
            answer = http.post("/v1/studies/alpha/requests",
                               content=_cancel(api_federation, ALICE, "alpha", job))
            assert answer.status_code == 200, answer.text
            assert answer.json()["ok"] is True
        final = await alice.wait(job, timeout=60)
        assert final.state == "aborted" and final.cancel_requested, final
        # Recorded as alice's: the signer of the envelope, not the API's connection.
        stored = await study_events(api_federation.fed, "alpha", job)
        (asked,) = [e for e in stored if isinstance(e, JobCancelRequested)]
        assert asked.actor == ALICE
    finally:
        await alice.close()


def test_sse_sends_a_studys_new_events_and_resumes_after_last_event_id(
        api_federation: ApiFederation) -> None:
    with api_federation.http(BOB) as bob:
        total = bob.get("/v1/studies/beta/timeline", params={"limit": 1}).json()["total"]
        first = _sse(bob, "/v1/studies/beta/events", {}, count=total)
        assert [e["seq"] for e in first] == list(range(1, total + 1))
        resumed = _sse(bob, "/v1/studies/beta/events",
                       {"Last-Event-ID": str(total - 2)}, count=2)
        assert [e["seq"] for e in resumed] == [total - 1, total]


def _sse(http: httpx.Client, path: str, headers: dict[str, str], *, count: int
         ) -> list[dict[str, object]]:
    got: list[dict[str, object]] = []
    deadline = time.monotonic() + 30
    with http.stream("GET", path, headers=headers) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data:"):
                got.append(json.loads(line[5:]))
            if len(got) >= count or time.monotonic() > deadline:
                break
    return got
