"""``/mcp`` on the live server, driven by the ``mcp`` SDK's own client (streamable HTTP, ClientSession):
the tools are listed, ``search`` answers hits with text and scores, and the key is required."""

from __future__ import annotations

import json

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from service.config import Settings
from tests.support.app import API_KEY
from tests.support.server import live_server

DIM = 384
DOCS = [
    {"id": "espresso", "text": "Espresso forces hot water through finely ground coffee.", "metadata": {"tag": "coffee"},
     "vector": [1.0] + [0.0] * (DIM - 1)},
    {"id": "tea", "text": "Green tea is steeped at about eighty degrees.", "metadata": {"tag": "tea"},
     "vector": [0.0, 1.0] + [0.0] * (DIM - 2)},
]


def _seed(url: str) -> None:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    assert httpx.post(f"{url}/v1/collections", headers=headers, json={"name": "kb"}).status_code == 201
    r = httpx.post(f"{url}/v1/collections/kb/documents", headers=headers, json={"documents": DOCS}, timeout=60)
    assert r.status_code == 200, r.text


async def test_tools_listed_and_search_answers_hits(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url:
        _seed(url)
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            tools = await session.list_tools()
            listed = await session.call_tool("list_collections", {})
            found = await session.call_tool("search", {"collection": "kb", "query": "how is espresso made?",
                                                       "top_k": 2, "mode": "sparse"})
            filtered = await session.call_tool("search", {"collection": "kb", "query": "green tea",
                                                          "filter": {"tag": "tea"}})
            missing = await session.call_tool("search", {"collection": "nope", "query": "x"})
            too_many = await session.call_tool("search", {"collection": "kb", "query": "x", "top_k": 10_000})
    assert init.server_info.name == "ragserve"
    by_name = {t.name: t for t in tools.tools}
    assert set(by_name) == {"search", "list_collections"}
    assert set(by_name["search"].input_schema["required"]) == {"collection", "query"}
    assert listed.is_error is False
    assert listed.structured_content == {"collections": [
        {"name": "kb", "points": 2, "dimensions": DIM, "model": "sentence-transformers/all-MiniLM-L6-v2"}]}
    assert found.is_error is False
    result = found.structured_content
    assert result is not None and result["mode"] == "sparse" and result["reranked"] is False
    assert [h["doc_id"] for h in result["hits"]] == ["espresso"]  # BM25: only one passage has its terms
    hit = result["hits"][0]
    assert hit["text"] == DOCS[0]["text"] and hit["score"] == hit["vector_score"] > 0
    assert json.loads(found.content[0].text) == result  # the same, as text, for clients without structure
    assert [h["doc_id"] for h in filtered.structured_content["hits"]] == ["tea"]  # type: ignore[index]
    assert missing.is_error is True
    assert missing.content[0].text == ("Error executing tool search: collection_not_found: "
                                       "collection 'nope' does not exist (param collection)")
    assert too_many.is_error is True
    assert too_many.content[0].text.startswith("Error executing tool search: top_k_too_large: ")


@pytest.mark.parametrize("key", [None, "wrong-key-0123456789abcdef"])
def test_mcp_needs_a_key(minilm_settings: Settings, key: str | None) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    with live_server(minilm_settings) as url:
        r = httpx.post(f"{url}/mcp", headers=headers, json=initialize)
        ok = httpx.post(f"{url}/mcp", headers={**headers, "Authorization": f"Bearer {API_KEY}"}, json=initialize)
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert r.json()["error"]["code"] == ("missing_api_key" if key is None else "invalid_api_key")
    assert ok.status_code == 200 and ok.json()["result"]["serverInfo"]["name"] == "ragserve"
