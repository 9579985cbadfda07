"""Schemathesis against the live API: generated requests (valid and not) to every operation
of the committed contract, as a caller with a real token, find no server error and no answer
that breaks the contract (status, content type, headers, body schema)."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a dev tool: "
                                   "make setup")
pytest.importorskip("litestar", reason="the HTTP API is not installed (make setup)")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fixtures.api import LEADS, ApiFederation  # noqa: E402
from tools._openapi import openapi_document  # noqa: E402

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
# The live event stream does not end: its contract is tested in test_httpapi.py.
# Fuzzing only (the coverage phase's boundary sweep costs minutes on a 2-core machine; the
# hostile-input tests in test_httpapi.py name the boundaries that matter).
CONFIG = schemathesis.config.SchemathesisConfig.from_dict(
    {"phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}}})
schema = schemathesis.openapi.from_dict(openapi_document(), config=CONFIG).exclude(
    path_regex=r"/events$")


@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_the_live_api_keeps_its_contract(case: object,
                                         api_federation: ApiFederation) -> None:
    token = _tokens(api_federation)
    case.call_and_validate(  # type: ignore[attr-defined]
        base_url=api_federation.url, headers={"Authorization": f"Bearer {token}"},
        verify=str(api_federation.ca), timeout=30, checks=CHECKS)


_TOKEN: dict[str, str] = {}


def _tokens(api: ApiFederation) -> str:
    # One token for the whole run: minting is cheap, but the caller is the point, not it.
    if api.url not in _TOKEN:
        _TOKEN[api.url] = api.token(LEADS["alpha"])
    return _TOKEN[api.url]
