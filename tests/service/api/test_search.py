"""/v1/search through the real stack: tiny Qwen3 embedding + reranker runners (vLLM) and the embedded Qdrant Edge store.
Where the claim is about ragserve's pipeline rather than the models (what reaches the reranker), the runners are
scripted at the network edge (:mod:`tests.support.scripted_runner`)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.config import Settings
from service.profiles import QWEN3
from tests.support.app import app_client
from tests.support.scripted_runner import ScriptedRunner, scripted_settings

DOCS = [
    {"id": "fox", "text": "The quick brown fox jumps over the lazy dog", "metadata": {"year": 2019, "tag": "animal"}},
    {"id": "rag", "text": "Retrieval augmented generation searches a vector database", "metadata": {"year": 2021, "tag": "ml"}},
    {"id": "gene", "text": "Proteins and genes regulate cells in patients", "metadata": {"year": 2020, "tag": "bio"}},
    {"id": "trial", "text": "Clinical trials compare treatments for mutations", "metadata": {"year": 2021, "tag": "bio"}},
    {"id": "digits", "text": "0123456789 counted twice: 9876543210", "metadata": {"year": 2018, "tag": "misc"}},
]


async def _seed(client: httpx.AsyncClient, name: str = "docs") -> None:
    r = await client.post("/v1/collections", json={"name": name, "filter_fields": {"year": "integer", "tag": "keyword"}})
    assert r.status_code == 201, r.text
    r = await client.post(f"/v1/collections/{name}/documents", json={"documents": DOCS})
    assert r.status_code == 200, r.text
    assert r.json()["upserted"] == len(DOCS)


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid", None])
async def test_document_searched_by_its_own_text_comes_first_without_rerank(
    minilm_settings: Settings, mode: str | None
) -> None:
    async with app_client(minilm_settings) as client:
        await _seed(client)
        for doc in DOCS:
            body = {"collection": "docs", "query": doc["text"], "top_k": 3}
            if mode:
                body["mode"] = mode
            r = await client.post("/v1/search", json=body)
            assert r.status_code == 200, r.text
            result = r.json()
            assert result["hits"][0]["doc_id"] == doc["id"]
            assert result["mode"] == (mode or "hybrid") and result["reranked"] is False
            if mode == "dense":
                assert result["hits"][0]["vector_score"] == pytest.approx(1.0, abs=1e-4)


async def test_qwen3_stack_returns_own_text_first_and_reranks(qwen3_settings: Settings) -> None:
    async with app_client(qwen3_settings) as client:
        await _seed(client)
        hits_by_doc = {}
        for doc in DOCS:
            r = await client.post(
                "/v1/search",
                json={"collection": "docs", "query": doc["text"], "top_k": 5, "rerank": {"enabled": False}},
            )
            assert r.status_code == 200, r.text
            hits_by_doc[doc["id"]] = r.json()["hits"]
        r = await client.post("/v1/search", json={"collection": "docs", "query": "fox and dog", "top_k": 5})
    # Random weights carry no meaning, but the query instruction is the same prefix for every query, so
    # the document whose text the query repeats must still be its nearest neighbour.
    firsts = [hits[0]["doc_id"] for hits in hits_by_doc.values()]
    assert firsts == list(hits_by_doc)
    body = r.json()
    assert r.status_code == 200 and body["reranked"] is True
    scores = [h["rerank_score"] for h in body["hits"]]
    assert sorted(h["doc_id"] for h in body["hits"]) == sorted(d["id"] for d in DOCS)  # each document, once
    assert all(0.0 < s < 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert [h["score"] for h in body["hits"]] == scores
    assert [h["rank"] for h in body["hits"]] == [1, 2, 3, 4, 5]
    # "fox and dog" was not asked before: the runner embedded it (a cache hit's stage would be embed_cache)
    assert set(body["timings_ms"]) == {"embed", "search", "rerank", "total"}
    assert all(isinstance(h["vector_score"], float) for h in body["hits"])


async def test_rerank_top_n_limits_candidates_and_top_k_limits_hits(tmp_path: Path) -> None:
    """Claims about ragserve's pipeline, not the reranker's weights, so the runners are scripted at the network
    edge: exactly the top_n candidates of the search (its top 3, in its order) reach the reranker with the
    query and the instruction, and the hits are the top_k of those by the reranker's scores, not the search's."""
    runner = ScriptedRunner(dimensions=QWEN3.embedding.dimensions)
    async with app_client(scripted_settings(tmp_path, profile="qwen3"), transports=runner.transports) as client:
        await _seed(client)
        plain = await client.post(
            "/v1/search", json={"collection": "docs", "query": "genes", "top_k": 3, "rerank": {"enabled": False}})
        assert plain.status_code == 200, plain.text
        candidates = [h["text"] for h in plain.json()["hits"]]
        # Ascending down the search's order, so reranking reverses it; the other documents would beat them all.
        scores = {text: 0.99 for text in (d["text"] for d in DOCS)} | dict(zip(candidates, (0.2, 0.5, 0.8), strict=True))
        runner.rerank_score = lambda query, text: scores[text]
        r = await client.post(
            "/v1/search",
            json={"collection": "docs", "query": "genes", "top_k": 2, "rerank": {"top_n": 3, "instruction": "Find biology"}},
        )
    body = r.json()
    assert r.status_code == 200, r.text
    (sent,) = runner.bodies("/rerank")
    assert sent == {"model": QWEN3.reranker.name, "query": "genes", "documents": candidates, "top_n": 3,
                    "chat_template_kwargs": {"instruction": "Find biology"}}
    assert body["reranked"] is True
    assert [(h["text"], h["rerank_score"], h["rank"]) for h in body["hits"]] == [
        (candidates[2], 0.8, 1), (candidates[1], 0.5, 2)]


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"tag": "bio"}, {"gene", "trial"}),
        ({"year": 2021}, {"rag", "trial"}),
        ({"year": {"gte": 2020}}, {"rag", "gene", "trial"}),
        ({"tag": ["animal", "misc"]}, {"fox", "digits"}),
        ({"tag": "bio", "year": {"lt": 2021}}, {"gene"}),
        ({"doc_id": "rag"}, {"rag"}),
        ({"tag": "none-such"}, set()),
    ],
)
async def test_filters(minilm_settings: Settings, flt: dict, expected: set[str]) -> None:
    async with app_client(minilm_settings) as client:
        await _seed(client)
        r = await client.post("/v1/search", json={"collection": "docs", "query": "anything", "top_k": 10, "filter": flt})
    assert r.status_code == 200, r.text
    assert {h["doc_id"] for h in r.json()["hits"]} == expected


async def test_upsert_same_id_replaces_instead_of_duplicating(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        await _seed(client)
        r = await client.post(
            "/v1/collections/docs/documents",
            json={"documents": [{"id": "fox", "text": "A new text about owls", "metadata": {"year": 2024}}]},
        )
        assert r.status_code == 200
        info = (await client.get("/v1/collections/docs")).json()
        r = await client.post("/v1/search", json={"collection": "docs", "query": "A new text about owls", "top_k": 1})
    assert info["points"] == len(DOCS)
    hit = r.json()["hits"][0]
    assert hit["doc_id"] == "fox" and hit["metadata"] == {"year": 2024}
