"""Dense, sparse (BM25) and hybrid search through the API, real MiniLM runner and the embedded Qdrant Edge store."""

from __future__ import annotations

import httpx
import pytest

from service.config import Settings
from tests.support.app import app_client

DOCS = [
    {"id": "boot-1", "text": "The device fails to boot and shows a blank screen after the firmware update."},
    {"id": "boot-2", "text": "After updating firmware the unit will not start; the display stays dark."},
    {"id": "boot-3", "text": "Startup problems after an update: the screen remains black and nothing loads."},
    {"id": "code", "text": "Boot halted with error XQ-7719 reported by the loader on the serial console."},
    {"id": "boot-4", "text": "If the machine does not power on after a software update, hold reset for ten seconds."},
]


async def _seed(client: httpx.AsyncClient, **create: object) -> None:
    assert (await client.post("/v1/collections", json={"name": "kb", **create})).status_code == 201
    r = await client.post("/v1/collections/kb/documents", json={"documents": DOCS})
    assert r.status_code == 200, r.text


async def _search(client: httpx.AsyncClient, query: str, **kw: object) -> dict:  # type: ignore[type-arg]
    r = await client.post("/v1/search", json={"collection": "kb", "query": query, "top_k": 5, **kw})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_exact_rare_token_is_found_by_sparse_and_hybrid(minilm_settings: Settings) -> None:
    query = "what does XQ-7719 mean"
    async with app_client(minilm_settings) as client:
        await _seed(client)
        sparse = await _search(client, query, mode="sparse")
        hybrid = await _search(client, query, mode="hybrid")
        dbsf = await _search(client, query, mode="hybrid", fusion="dbsf")
        dense = await _search(client, query, mode="dense")
    assert sparse["hits"][0]["doc_id"] == "code"
    assert [h["doc_id"] for h in sparse["hits"]] == ["code"]  # BM25 matches only documents with the terms
    assert hybrid["hits"][0]["doc_id"] == "code" and hybrid["mode"] == "hybrid"
    assert dbsf["hits"][0]["doc_id"] == "code"
    assert sorted(h["doc_id"] for h in dense["hits"]) == sorted(d["id"] for d in DOCS)  # dense ranks everything


async def test_bm25_statistics_follow_deletes_and_reindexing(minilm_settings: Settings) -> None:
    """Qdrant's IDF modifier counts live documents: adding documents with a term lowers its weight, deleting
    them restores it exactly."""
    extra = [{"id": f"x{i}", "text": f"loader message number {i}"} for i in range(12)]
    async with app_client(minilm_settings) as client:
        await _seed(client)

        async def loader_score() -> float:
            hits = (await _search(client, "loader", mode="sparse", filter={"doc_id": "code"}))["hits"]
            return float(hits[0]["vector_score"])

        alone = await loader_score()
        await client.post("/v1/collections/kb/documents", json={"documents": extra})
        common = await loader_score()
        for doc in extra:
            assert (await client.delete(f"/v1/collections/kb/documents/{doc['id']}")).status_code == 204
        after_delete = await loader_score()
        await client.post("/v1/collections/kb/documents", json={"documents": extra})
        reindexed = await loader_score()
        missing = await client.delete("/v1/collections/kb/documents/x0-not-there")
    assert common < alone * 0.8
    assert after_delete == pytest.approx(alone, rel=1e-6)
    assert reindexed == pytest.approx(common, rel=1e-6)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "document_not_found"


@pytest.mark.parametrize("mode", ["hybrid", "sparse"])
async def test_collection_without_sparse_refuses_sparse_modes(minilm_settings: Settings, mode: str) -> None:
    async with app_client(minilm_settings) as client:
        await _seed(client, sparse=False)
        r = await client.post("/v1/search", json={"collection": "kb", "query": "boot", "mode": mode})
        default = await _search(client, "boot")
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "sparse_not_enabled" and r.json()["error"]["param"] == "mode"
    assert default["mode"] == "dense" and default["hits"]


async def test_hybrid_respects_filters_and_stopword_queries(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        await _seed(client)
        filtered = await _search(client, "firmware update screen", filter={"doc_id": ["boot-3", "boot-4"]})
        stop = await _search(client, "the of and", mode="hybrid")
        stop_dense = await _search(client, "the of and", mode="dense")
        stop_sparse = await client.post("/v1/search", json={"collection": "kb", "query": "the of", "mode": "sparse"})
    assert {h["doc_id"] for h in filtered["hits"]} == {"boot-3", "boot-4"}
    # Nothing to match lexically: hybrid falls back to dense, the same ranking and scores (to float noise: the
    # query is embedded twice, and a runner's batch need not be bit-for-bit repeatable).
    assert [h["doc_id"] for h in stop["hits"]] == [h["doc_id"] for h in stop_dense["hits"]]
    assert [h["score"] for h in stop["hits"]] == pytest.approx([h["score"] for h in stop_dense["hits"]], rel=1e-5)
    assert stop["mode"] == "dense" and len(stop["hits"]) == len(DOCS)  # what ran, not what was asked
    assert stop_sparse.status_code == 400 and stop_sparse.json()["error"]["code"] == "empty_sparse_query"


async def test_custom_analysis_settings_are_stored_and_used(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        await _seed(client, sparse={"stemming": False, "stopwords": False})
        info = (await client.get("/v1/collections/kb")).json()
        stemmed = await _search(client, "updates", mode="sparse")  # no stemming: 'updates' != 'update'
        exact = await _search(client, "update", mode="sparse")
    assert info["sparse"]["stemming"] is False and info["sparse"]["stopwords"] is False
    assert stemmed["hits"] == []
    assert {h["doc_id"] for h in exact["hits"]} == {"boot-1", "boot-3", "boot-4"}
