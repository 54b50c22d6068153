"""/v1/embeddings and /v1/rerank: the runners' own APIs behind ragserve's auth."""

from __future__ import annotations

import math

from service.config import Settings
from tests.support.app import app_client


async def test_openai_embeddings(qwen3_settings: Settings) -> None:
    async with app_client(qwen3_settings) as client:
        r = await client.post("/v1/embeddings", json={"input": ["one text", "two texts"], "model": "anything"})
        small = await client.post("/v1/embeddings", json={"input": "one text", "dimensions": 32})
        bad = await client.post("/v1/embeddings", json={"input": "x", "dimensions": 4096})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == "Qwen/Qwen3-Embedding-0.6B"
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(len(d["embedding"]) == 1024 for d in body["data"])
    vec = small.json()["data"][0]["embedding"]
    assert len(vec) == 32 and math.isclose(math.hypot(*vec), 1.0, rel_tol=1e-4)  # Matryoshka, renormalised
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "unsupported_dimensions"


async def test_rerank_cohere_shape(qwen3_settings: Settings) -> None:
    docs = ["The quick brown fox", {"text": "A lazy dog sleeps"}, "Genes and proteins"]
    async with app_client(qwen3_settings) as client:
        r = await client.post("/v1/rerank", json={"query": "fox", "documents": docs, "top_n": 2})
        with_instr = await client.post("/v1/rerank", json={"query": "fox", "documents": docs[:1], "instruction": "Find foxes only, please"})
        plain = await client.post("/v1/rerank", json={"query": "fox", "documents": docs[:1]})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == 2
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    # The instruction reaches the runner's template: the prompt grows by the instruction's tokens.
    assert with_instr.json()["usage"]["prompt_tokens"] != plain.json()["usage"]["prompt_tokens"]


async def test_rerank_without_reranker_is_a_clear_400(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        r = await client.post("/v1/rerank", json={"query": "fox", "documents": ["a"]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "reranker_not_configured"
