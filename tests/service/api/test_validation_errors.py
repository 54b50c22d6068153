"""422s speak of the request's fields only: no union member labels from the validation library (function reprs
with their addresses, ``constrained-str``), no ``Value error,`` prefixes; the message is about the error that
says what is wrong with the value, not that it was not the union's first member."""

from __future__ import annotations

from typing import Any

import pytest

from service.config import Settings
from tests.support.app import app_client

INTERNALS = ("function-after", "functools", " at 0x", "constrained-", "Value error, ", "list[", "dict[")
BODIES: list[tuple[str, dict[str, Any], str, str]] = [
    ("/v1/embeddings", {"input": ["a", ""]}, "input.1", "input.1: String should have at least 1 character"),
    ("/v1/embeddings", {"input": ["a", None]}, "input.1", "input.1: Input should be a valid string"),
    ("/v1/search", {"collection": "kb", "query": ["a"]}, "query", "query: Input should be a valid string"),
    ("/v1/search", {"collection": "kb", "query": "q", "filter": {"n": {}}}, "filter.n",
     "filter.n: a range needs at least one of gt, gte, lt, lte"),
    ("/v1/collections/kb/documents", {"documents": [{"id": "a", "text": ""}]}, "documents.0.text",
     "documents.0.text: String should have at least 1 character"),
]


@pytest.mark.parametrize(("path", "body", "param", "message"), BODIES, ids=[f"{b[0]} {b[2]}" for b in BODIES])
async def test_a_422_names_the_field_and_nothing_of_the_library(
    minilm_settings: Settings, path: str, body: dict[str, Any], param: str, message: str
) -> None:
    async with app_client(minilm_settings) as client:
        r = await client.post(path, json=body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["param"], error["message"]) == (param, message)
    assert not [x for x in INTERNALS if x in r.text], r.text
    assert all(d["loc"][0] == "body" for d in error["details"])
