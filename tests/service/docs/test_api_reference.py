"""docs/api.md: fresh, written from a default deployment whatever the environment says, one section per
operation with the scope the policy table gives it."""

from __future__ import annotations

import pytest

from service.auth.policy import ROUTE_SCOPES
from service.docs import api_reference
from service.docs.markdown import slug
from tests.service.docs.stale import assert_fresh


@pytest.fixture(scope="module")
def rendered() -> str:
    return api_reference.render()


def test_docs_api_md_is_fresh(rendered: str) -> None:
    assert_fresh(api_reference.OUTPUT, rendered, api_reference.COMMAND)


def test_the_environment_does_not_reach_the_document(monkeypatch: pytest.MonkeyPatch, rendered: str) -> None:
    monkeypatch.setenv("RAGSERVE_PROFILE", "minilm")
    monkeypatch.setenv("RAGSERVE_LIMITS__MAX_TOP_K", "5")
    monkeypatch.setenv("RAGSERVE_NOT_A_SETTING", "1")  # no deployment starts here: nothing to refuse
    assert api_reference.render() == rendered


def test_every_operation_has_its_section_and_its_scope(rendered: str) -> None:
    doc = api_reference.build_app().openapi()
    for path, operations in doc["paths"].items():
        for method in operations:
            heading = f"{method.upper()} {path}"
            assert f"\n## {heading}\n" in rendered, heading
            assert f"(#{slug(heading)})" in rendered, heading  # listed in the routes table
    section = rendered.split("\n## POST /v1/collections\n", 1)[1].split("\n## ", 1)[0]
    assert ROUTE_SCOPES[("POST", "/v1/collections")] == {"admin"} and "Scope: `admin`." in section
    delete = rendered.split("\n## DELETE /v1/collections/{name}/documents/{doc_id}\n", 1)[1].split("\n## ", 1)[0]
    assert "Scope: `write`." in delete  # the policy names the route {doc_id:path}
    health = rendered.split("\n## GET /health\n", 1)[1].split("\n## ", 1)[0]
    assert "Scope: none (no key)." in health


def test_request_fields_carry_their_limits_and_defaults(rendered: str) -> None:
    search = rendered.split("\n## POST /v1/search\n", 1)[1].split("\n## ", 1)[0]
    assert "| `top_k` | integer |  | `10` | 1–200 |" in search
    assert "| `query` | string or null |  |  | length 1–4096; no control characters |" in search


def test_routes_outside_the_document_and_the_error_codes_are_listed(rendered: str) -> None:
    assert "| DELETE, GET, POST | `/mcp` | `read` |" in rendered
    assert "| 507 | `store_error` | `store_full` |" in rendered
    assert "[IngestRequest](#ingestrequest)" in rendered and "\n### IngestRequest\n" in rendered
