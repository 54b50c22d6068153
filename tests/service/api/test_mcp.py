"""``/mcp`` on the live server, driven by the ``mcp`` SDK's own client (streamable HTTP, ClientSession):
the tools are listed, ``search`` answers hits with text and scores, and the key is required."""

from __future__ import annotations

import json
import re

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

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


SEARCH_PARAMS = {
    "collection": "The collection to search: one of the names list_collections gives.",
    "query": "The user's question or search text, in their words.",
    "top_k": "How many hits to return: 1 to 200. Default 5.",
    "filter": 'Conditions, all required: {"year": 2020} (equal), {"tag": ["a", "b"]} (any of), '
              '{"n": {"gte": 1, "lt": 5}} (range); "doc_id" is the document id, every other key a metadata field '
              "(a.b for a nested one). Omit for no filter.",
    "mode": "How to match: dense (embedding similarity), sparse (BM25 keyword match) or hybrid (both, fused by "
            "reciprocal rank). Default: hybrid where the collection has sparse vectors, else dense.",
    "rerank": "true to rerank the candidates with the reranker, false not to. Default: on when this deployment has "
              "a reranker.",
}
READ_ONLY = {"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False}


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
            context = await session.call_tool("context", {"collection": "kb", "query": "how is espresso made?",
                                                          "budget_tokens": 60, "mode": "sparse"})
            tiny = await session.call_tool("context", {"collection": "kb", "query": "x", "budget_tokens": 2})
    assert init.server_info.name == "ragserve"
    by_name = {t.name: t for t in tools.tools}
    assert set(by_name) == {"search", "context", "list_collections"}
    assert set(by_name["context"].input_schema["required"]) == {"collection", "query"}
    assert context.is_error is False and context.structured_content is not None
    assert context.structured_content["context"] == f"[1] espresso\n{DOCS[0]['text']}"
    assert re.fullmatch(r"s_[0-9a-f]{32}", context.structured_content["search_id"])
    assert [(p["number"], p["doc_id"], p["text"]) for p in context.structured_content["passages"]] == [
        (1, "espresso", DOCS[0]["text"])]
    assert context.structured_content["tokens"] <= 60
    assert tiny.is_error is True and tiny.content[0].text.startswith("Error executing tool context: budget_too_small: ")
    assert set(by_name["search"].input_schema["required"]) == {"collection", "query"}
    assert {name: p["description"] for name, p in by_name["search"].input_schema["properties"].items()} == SEARCH_PARAMS
    assert by_name["search"].input_schema["properties"]["top_k"] | {"description": ""} == {
        "type": "integer", "minimum": 1, "maximum": 200, "default": 5, "title": "Top K", "description": ""}
    assert {name: t.annotations.model_dump(by_alias=True, exclude_none=True)  # type: ignore[union-attr]
            for name, t in by_name.items()} == {name: READ_ONLY for name in by_name}
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
    assert re.fullmatch(r"s_[0-9a-f]{32}", result["search_id"])  # for feedback
    assert [h["doc_id"] for h in filtered.structured_content["hits"]] == ["tea"]  # type: ignore[index]
    assert missing.is_error is True
    assert missing.content[0].text == ("Error executing tool search: collection_not_found: "
                                       "collection 'nope' does not exist (param collection)")
    assert too_many.is_error is True
    assert too_many.content[0].text.startswith("Error executing tool search: top_k_too_large: ")


MISSING = "missing API key: send 'Authorization: Bearer <key>'"
WRONG = "wrong API key: this server holds no such key; send 'Authorization: Bearer <key>' with one it issued"


@pytest.mark.parametrize(("key", "code", "message"), [
    (None, "missing_api_key", MISSING), ("wrong-key-0123456789abcdef", "invalid_api_key", WRONG)])
async def test_a_missing_or_wrong_key_reaches_the_user_in_words(
    minilm_settings: Settings, key: str | None, code: str, message: str,
) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with live_server(minilm_settings) as url:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            with pytest.raises(MCPError) as refused:
                await session.initialize()
            raw = await http.post(f"{url}/mcp", headers={"Accept": "application/json, text/event-stream"},
                                  json={"jsonrpc": "2.0", "id": 1, "method": "ping"})  # the body it carried
    assert str(refused.value) == message  # what an MCP client prints
    assert (refused.value.code, refused.value.data) == (-32001, {"error": {
        "type": "authentication_error", "code": code, "message": message}})
    assert raw.status_code == 401 and raw.headers["WWW-Authenticate"] == "Bearer"
    assert raw.json() == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32001, "message": message, "data": {"error": {
            "type": "authentication_error", "code": code, "message": message}}}}
