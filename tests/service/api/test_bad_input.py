"""Every bad input gets a clear 4xx in the error envelope, and nothing already stored changes."""

from __future__ import annotations

import httpx
import pytest

from service.config import Settings
from tests.support.app import app_client

SEED = [{"id": f"d{i}", "text": f"stored document number {i}", "metadata": {"n": i}} for i in range(3)]


async def _snapshot(client: httpx.AsyncClient) -> tuple[int, list[tuple[str, str]]]:
    info = (await client.get("/v1/collections/keep")).json()
    r = await client.post("/v1/search", json={"collection": "keep", "query": "stored document", "top_k": 10})
    return info["points"], sorted((h["doc_id"], h["text"]) for h in r.json()["hits"])


def _assert_envelope(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code
    assert err["message"] and err["type"]


BAD_REQUESTS = [
    ("unknown collection (search)", "POST", "/v1/search", {"collection": "nope", "query": "x"}, 404, "collection_not_found"),
    ("unknown collection (docs)", "POST", "/v1/collections/nope/documents",
     {"documents": [{"id": "a", "text": "x"}]}, 404, "collection_not_found"),
    ("unknown collection (get)", "GET", "/v1/collections/nope", None, 404, "collection_not_found"),
    ("empty query", "POST", "/v1/search", {"collection": "keep", "query": ""}, 422, "validation_error"),
    ("blank query", "POST", "/v1/search", {"collection": "keep", "query": "   "}, 422, "empty_query"),
    ("10,000 documents", "POST", "/v1/collections/keep/documents",
     {"documents": [{"id": f"x{i}", "text": "t"} for i in range(10_000)]}, 413, "too_many_documents"),
    ("5 MB document", "POST", "/v1/collections/keep/documents",
     {"documents": [{"id": "d0", "text": "a" * 5_000_000}]}, 413, "document_too_large"),
    ("wrong vector size", "POST", "/v1/collections/keep/documents",
     {"documents": [{"id": "d0", "text": "replacement", "vector": [0.1] * 7}]}, 422, "vector_dimension_mismatch"),
    ("one bad doc among good ones", "POST", "/v1/collections/keep/documents",
     {"documents": [{"id": "d1", "text": "good"}, {"id": "d2", "text": ""}]}, 422, "validation_error"),
    ("duplicate ids", "POST", "/v1/collections/keep/documents",
     {"documents": [{"id": "d1", "text": "a"}, {"id": "d1", "text": "b"}]}, 422, "duplicate_id"),
    ("unknown field", "POST", "/v1/search", {"collection": "keep", "query": "x", "topk": 3}, 422, "validation_error"),
    ("top_k too large", "POST", "/v1/search", {"collection": "keep", "query": "x", "top_k": 100000}, 422, "top_k_too_large"),
    ("bad filter", "POST", "/v1/search", {"collection": "keep", "query": "x", "filter": {"n": {"near": 1}}}, 422, "invalid_filter"),
    ("rerank without reranker", "POST", "/v1/search",
     {"collection": "keep", "query": "x", "rerank": {"enabled": True}}, 400, "reranker_not_configured"),
    ("bad collection name", "POST", "/v1/collections", {"name": "../etc"}, 422, "validation_error"),
    ("unsupported dimensions", "POST", "/v1/collections", {"name": "other", "dimensions": 999}, 422, "unsupported_dimensions"),
    ("existing collection", "POST", "/v1/collections", {"name": "keep"}, 409, "collection_exists"),
]


@pytest.mark.parametrize(("label", "method", "path", "body", "status", "code"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
async def test_bad_input_is_refused_and_changes_nothing(
    minilm_settings: Settings, label: str, method: str, path: str, body: dict | None, status: int, code: str
) -> None:
    async with app_client(minilm_settings) as client:
        assert (await client.post("/v1/collections", json={"name": "keep"})).status_code == 201
        assert (await client.post("/v1/collections/keep/documents", json={"documents": SEED})).status_code == 200
        before = await _snapshot(client)
        r = await client.request(method, path, json=body)
        _assert_envelope(r, status, code)
        assert await _snapshot(client) == before
        names = [c["name"] for c in (await client.get("/v1/collections")).json()["collections"]]
    assert names == ["keep"]


async def test_invalid_json_and_oversized_body(minilm_settings: Settings) -> None:
    minilm_settings.limits.max_request_bytes = 1_000_000
    async with app_client(minilm_settings) as client:
        await client.post("/v1/collections", json={"name": "keep"})
        await client.post("/v1/collections/keep/documents", json={"documents": SEED})
        before = await _snapshot(client)
        r = await client.post("/v1/collections/keep/documents", content=b'{"documents": [', headers={"content-type": "application/json"})
        _assert_envelope(r, 400, "invalid_json")
        r = await client.post("/v1/collections/keep/documents", content=b"x" * 2_000_000, headers={"content-type": "application/json"})
        _assert_envelope(r, 413, "request_too_large")
        assert await _snapshot(client) == before


async def test_unknown_route_uses_the_envelope(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        _assert_envelope(await client.get("/v1/nothing-here"), 404, "route_not_found")
