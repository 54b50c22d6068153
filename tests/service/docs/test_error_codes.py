"""The error-code catalogue finds the codes where the source raises them, with their status and type."""

from __future__ import annotations

import pytest

from service.docs.error_codes import catalogue


@pytest.fixture(scope="module")
def codes() -> dict[tuple[int, str], str]:
    return {(e.status, e.code): e.type for e in catalogue()}


@pytest.mark.parametrize(("status", "code", "type_"), [
    (400, "url_not_allowed", "invalid_request"),       # a class's own code (service/security/errors.py)
    (400, "empty_filter", "invalid_request"),          # code="..." where it is raised
    (400, "json_too_deep", "invalid_request"),         # BodyError("...")
    (403, "insufficient_scope", "permission_error"),
    (404, "route_not_found", "not_found"),             # the framework's own 404
    (413, "request_too_large", "invalid_request"),
    (415, "unsupported_image_format", "invalid_request"),
    (422, "control_character", "invalid_request"),     # a request model's refuse("...")
    (429, "overloaded", "overloaded"),
    (501, "mcp_not_installed", "not_implemented"),     # error_response(501, ...)
    (503, "generation_unavailable", "upstream_error"),  # a runner client's unavailable_code
    (507, "store_full", "store_error"),
])
def test_known_codes_are_found(codes: dict[tuple[int, str], str], status: int, code: str, type_: str) -> None:
    assert codes.get((status, code)) == type_


def test_every_entry_names_where_it_is_raised() -> None:
    for entry in catalogue():
        assert entry.modules and all(m.endswith(".py") and not m.startswith("service/client/") for m in entry.modules)
