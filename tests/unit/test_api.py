"""The request/reply contract on `cairn.api.*`: one union, one envelope, typed answers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from cairn import api
from cairn.errors import InvalidInput, NotFound, PermissionDenied
from cairn.events import JobSubmitted
from cairn.names import is_name
from cairn.subjects import ApiAddress, api_fed, api_study, parse_api, site_logs
from tools.check_schemas import incompatibilities, read_tree

REPO = Path(__file__).resolve().parents[2]


def test_every_verb_is_one_struct_with_a_unique_tag_and_a_scope() -> None:
    tags = [str(cls.__struct_config__.tag) for cls in api.REQUEST_TYPES]
    assert len(tags) == len(set(tags))
    assert all(is_name(tag) for tag in tags)
    assert {cls.SCOPE for cls in api.REQUEST_TYPES} == {"fed", "study", "site", "validation"}


def test_an_envelope_round_trips_with_its_typed_request() -> None:
    spec = api.JobRequest(name="fedavg", roles=[])
    sent = api.Envelope(request=api.Submit(spec=spec), actor="alice@org-a", study="lung",
                        nonce="n-1", expires=datetime(2030, 1, 1, tzinfo=UTC), key_id="k1",
                        signature="c2ln")
    data = api.encode_envelope(sent)
    assert json.loads(data)["request"]["type"] == "submit"
    got = api.decode_envelope(data, verb="submit", study="lung")
    assert got == sent
    match got.request:
        case api.Submit(spec=api.JobRequest(name=name)):
            assert name == "fedavg"
        case _:
            pytest.fail(f"decoded as {got.request!r}")


@pytest.mark.parametrize(("data", "verb", "study", "what"), [
    (b"not json", "submit", "lung", "malformed request"),
    (b'{"actor": "x"}', "submit", "lung", "missing required field `request`"),
    (b'{"request": {"type": "no-such-verb"}}', "submit", "lung", "malformed request"),
    (b'{"request": {"type": "jobs"}}', "submit", "lung", "a 'jobs' request sent on a 'submit'"),
    (b'{"request": {"type": "jobs"}, "study": "other"}', "jobs", "lung", "study other"),
    (b'{"request": {"type": "job", "job": 7}}', "job", "lung", "Expected `str`"),
])
def test_a_bad_request_is_refused_naming_the_problem(data: bytes, verb: str, study: str,
                                                      what: str) -> None:
    with pytest.raises(InvalidInput) as err:
        api.decode_envelope(data, verb=verb, study=study)
    assert what in str(err.value)


def test_an_oversized_request_is_refused_before_decoding() -> None:
    huge = b'{"request": {"type": "jobs"}, "actor": "' + b"x" * api.MAX_REQUEST_BYTES + b'"}'
    with pytest.raises(InvalidInput, match="byte limit"):
        api.decode_envelope(huge, verb="jobs")


def test_replies_carry_a_typed_result_or_the_typed_error() -> None:
    ok = api.decode_reply(api.encode_result(api.Submitted(job="j-1")), subject="s")
    assert ok == api.Submitted(job="j-1")
    denied = api.encode_error(PermissionDenied("bob may not cancel j-1", field="job"))
    assert json.loads(denied) == {"ok": False, "error": {
        "code": "permission-denied", "message": "bob may not cancel j-1", "field": "job"}}
    with pytest.raises(PermissionDenied, match="may not cancel") as err:
        api.decode_reply(denied, subject="s")
    assert err.value.field == "job"
    with pytest.raises(NotFound):
        api.decode_reply(api.encode_error(NotFound("no job")), subject="s")
    with pytest.raises(InvalidInput, match="is not a reply"):
        api.decode_reply(b"[]", subject="cairn.api.fed.study-list")


def test_request_subjects_parse_back_to_their_scope_verb_and_token() -> None:
    assert parse_api(api_fed("study-list")) == ApiAddress("fed", "study-list")
    assert parse_api(api_study("lung", "submit")) == ApiAddress("study", "submit", study="lung")
    assert parse_api(site_logs("site-a")) == ApiAddress("site", "logs", site="site-a")
    for bad in ("cairn.api.study.lung", "cairn.api.study.S1.submit", "cairn.study.x.y",
                "cairn.api.fed.a.b"):
        with pytest.raises(InvalidInput):
            parse_api(bad)


def test_job_request_and_job_submitted_share_their_fields() -> None:
    """`job.submitted` is the request plus the event envelope: the same names, types and
    defaults, so a submit can never drop or retype a field on its way into the event."""
    request = {f.name: f for f in msgspec.inspect.type_info(api.JobRequest).fields}
    event = {f.name: f for f in msgspec.inspect.type_info(JobSubmitted).fields}
    for name, field in request.items():
        assert name in event, name
        assert (event[name].type, event[name].default) == (field.type, field.default), name


def test_the_committed_api_schemas_hold_every_verb() -> None:
    files = read_tree(REPO / "schemas")
    for cls in api.REQUEST_TYPES:
        assert f"api/request.{cls.__struct_config__.tag!s}.json" in files
    index = json.loads(files["index.json"])["api"]
    assert index["submit"]["subject"] == "cairn.api.study.{study}.submit"


def test_a_breaking_change_to_a_request_is_caught() -> None:
    baseline = read_tree(REPO / "schemas")
    candidate = dict(baseline)
    schema = json.loads(candidate["api/request.cancel.json"])
    schema["$defs"]["JobCancel"]["properties"].pop("job")
    candidate["api/request.cancel.json"] = json.dumps(schema)
    assert any("api/request.cancel" in p and "'job' removed" in p
               for p in incompatibilities(baseline, candidate))
