"""The HTTP API's OpenAPI contract: generated from the application, committed, and held to
its baseline by `tools/check_schemas.py` (a removed field, operation or status fails)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

pytest.importorskip("litestar", reason="the HTTP API is not installed (make setup)")

from tests.conftest import REPO  # noqa: E402
from tools._openapi import OPENAPI, check_openapi, openapi_document  # noqa: E402
from tools.check_schemas import incompatibilities  # noqa: E402


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return openapi_document()


def _files(doc: dict[str, Any]) -> dict[str, str]:
    return {OPENAPI: json.dumps(doc)}


def test_the_document_is_openapi_31_with_every_read_paged(document: dict[str, Any]) -> None:
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    lists = [p for p, ops in document["paths"].items()
             if "get" in ops and "items" in json.dumps(ops["get"]["responses"]["200"])]
    assert lists
    for path in ("/v1/studies", "/v1/studies/{study}/jobs", "/v1/sites", "/v1/recipes",
                 "/v1/evidence", "/v1/studies/{study}/timeline"):
        names = {p["name"] for p in document["paths"][path]["get"]["parameters"]}
        assert {"offset", "limit"} <= names, path


def test_the_committed_contract_is_the_generated_one(document: dict[str, Any]) -> None:
    committed = json.loads((REPO / "schemas" / OPENAPI).read_text())
    assert committed == document, "schemas/openapi.json is stale: run `make schemas`"
    baseline = (REPO / "schemas" / "baseline" / OPENAPI).read_text()
    assert check_openapi({OPENAPI: baseline}, _files(document)) == []


def test_a_removed_response_field_is_incompatible(document: dict[str, Any]) -> None:
    changed = copy.deepcopy(document)
    del changed["components"]["schemas"]["JobSummary"]["properties"]["state"]
    problems = incompatibilities(_files(document), _files(changed))
    assert any("GET /v1/studies/{study}/jobs 200.items[].state: field removed" in p
               for p in problems), problems


def test_a_removed_operation_or_status_or_a_new_required_parameter_is_incompatible(
        document: dict[str, Any]) -> None:
    changed = copy.deepcopy(document)
    del changed["paths"]["/v1/sites"]
    del changed["paths"]["/v1/recipes"]["get"]["responses"]["404"]
    changed["paths"]["/v1/evidence"]["get"]["parameters"].append(
        {"name": "since", "in": "query", "required": True, "schema": {"type": "string"}})
    problems = check_openapi(_files(document), _files(changed))
    assert any("GET /v1/sites: operation removed" in p for p in problems)
    assert any("GET /v1/recipes: response 404 removed" in p for p in problems)
    assert any("new required query parameter since" in p for p in problems)


def test_additions_are_compatible_and_a_new_major_may_break(document: dict[str, Any]) -> None:
    added = copy.deepcopy(document)
    added["components"]["schemas"]["JobSummary"]["properties"]["priority"] = {"type": "integer"}
    added["paths"]["/v1/new"] = {"get": {"responses": {"200": {"description": "ok"}}}}
    assert check_openapi(_files(document), _files(added)) == []
    broken = copy.deepcopy(document)
    del broken["paths"]["/v1/sites"]
    broken["info"]["version"] = "2.0.0"
    assert check_openapi(_files(document), _files(broken)) == []
