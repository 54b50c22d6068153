"""/v1/search with ``score_details``: a hybrid hit carries its dense and BM25 scores beside the fused one, each
exactly what a dense-only and a sparse-only search give the same hit, on both store backends (Qdrant Edge in
this process, and the server backend on qdrant-client's local mode). The embedding runner is scripted (a vector
per text, :mod:`tests.support.scripted_embed`), so the dense scores have an independent oracle too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient

from service.profiles import QWEN3
from tests.support.app import app_client
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings, vector
from tests.support.scripted_runner import ScriptedRunner
from tests.support.scripted_runner import scripted_settings as scripted_runner_settings

DOCS = [
    {"id": "boot", "text": "The device fails to boot after the firmware update."},
    {"id": "screen", "text": "A blank screen after updating firmware: hold reset."},
    {"id": "loader", "text": "Boot halted with error XQ-7719 reported by the loader."},
    {"id": "chart", "text": "The chart shows quarterly revenue rising in every region."},
    {"id": "fox", "text": "The quick brown fox jumps over the lazy dog."},
    {"id": "tea", "text": "Green tea steeps best at eighty degrees for two minutes."},
]
QUERY = "firmware boot loader"
NO_TERM = {"chart", "fox", "tea"}  # share no word with QUERY: BM25 does not match them
STOP_WORDS = "what is the"
TOL = 1e-5


@asynccontextmanager
async def _client(tmp_path: Path, backend: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = scripted_settings(tmp_path)
    settings.qdrant.edge_process = False  # the claim is about the scores, not the process boundary
    store = AsyncQdrantClient(location=":memory:") if backend == "server" else None
    async with app_client(settings, transports={"embedding": ScriptedEmbedder().transport},
                          store_client=store) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        r = await client.post("/v1/collections/kb/documents", json={"documents": DOCS})
        assert r.status_code == 200, r.text
        yield client


async def _search(client: httpx.AsyncClient, **kw: Any) -> dict[str, Any]:
    r = await client.post("/v1/search", json={"collection": "kb", "query": QUERY, "top_k": len(DOCS), **kw})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _cosine(text: str, query: str = QUERY) -> float:
    return float(np.dot(vector(query), vector(text)))


@pytest.mark.parametrize("backend", ["edge", "server"])
@pytest.mark.parametrize("fusion", ["rrf", "dbsf"])
async def test_a_hybrid_hit_carries_the_dense_and_bm25_scores_of_the_one_mode_searches(
    tmp_path: Path, backend: str, fusion: str
) -> None:
    async with _client(tmp_path, backend) as client:
        hybrid = await _search(client, mode="hybrid", fusion=fusion, score_details=True)
        dense = await _search(client, mode="dense")
        sparse = await _search(client, mode="sparse")
    assert hybrid["mode"] == "hybrid" and {h["doc_id"] for h in hybrid["hits"]} == {d["id"] for d in DOCS}
    cosine = {h["id"]: h["vector_score"] for h in dense["hits"]}
    bm25 = {h["id"]: h["vector_score"] for h in sparse["hits"]}
    assert {h["doc_id"] for h in sparse["hits"]} == {d["id"] for d in DOCS} - NO_TERM
    for hit in hybrid["hits"]:
        assert hit["score"] == hit["vector_score"]  # the fused score, as before
        assert hit["dense_score"] == pytest.approx(cosine[hit["id"]], abs=TOL)
        assert hit["dense_score"] == pytest.approx(_cosine(hit["text"]), abs=TOL)
        if hit["doc_id"] in NO_TERM:
            assert hit["bm25_score"] is None
        else:
            assert hit["bm25_score"] == pytest.approx(bm25[hit["id"]], abs=TOL)
            assert hit["bm25_score"] > 0
        assert hit["rerank_score"] is None
    assert "score_details" in hybrid["timings_ms"]


@pytest.mark.parametrize("backend", ["edge", "server"])
async def test_score_details_are_asked_for(tmp_path: Path, backend: str) -> None:
    """Off by default (a hybrid search then makes no more engine calls); a one-mode search copies its score."""
    async with _client(tmp_path, backend) as client:
        plain = await _search(client, mode="hybrid")
        dense = await _search(client, mode="dense", score_details=True)
        sparse = await _search(client, mode="sparse", score_details=True)
        refused = await client.post("/v1/search", json={"collection": "kb", "query": QUERY, "score_details": "yes"})
    assert [(h["dense_score"], h["bm25_score"]) for h in plain["hits"]] == [(None, None)] * len(DOCS)
    assert "score_details" not in plain["timings_ms"]
    assert [(h["dense_score"], h["bm25_score"]) for h in dense["hits"]] == \
        [(h["vector_score"], None) for h in dense["hits"]]
    assert [(h["dense_score"], h["bm25_score"]) for h in sparse["hits"]] == \
        [(None, h["vector_score"]) for h in sparse["hits"]]
    assert "score_details" not in dense["timings_ms"] and "score_details" not in sparse["timings_ms"]
    assert refused.status_code == 422


async def test_a_hybrid_query_of_stop_words_only_has_no_bm25_scores(tmp_path: Path) -> None:
    """Hybrid degrades to dense when BM25 has no term to search for: the score is the dense one, BM25 none, and
    the answer's mode says dense (the playground labels the score by it)."""
    async with _client(tmp_path, "edge") as client:
        r = await client.post("/v1/search", json={"collection": "kb", "query": STOP_WORDS, "mode": "hybrid",
                                                  "score_details": True, "top_k": 3})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert r.json()["mode"] == "dense"
    assert [(h["dense_score"], h["bm25_score"]) for h in hits] == [(h["vector_score"], None) for h in hits]
    assert [h["dense_score"] for h in hits] == pytest.approx([_cosine(h["text"], STOP_WORDS) for h in hits], abs=TOL)


async def test_a_reranked_hybrid_hit_keeps_its_rerank_score_beside_the_mode_scores(tmp_path: Path) -> None:
    """The reranker orders the hits (``score`` is its score); the fused, dense and BM25 scores are still the
    engine's, for exactly the hits returned."""
    runner = ScriptedRunner(dimensions=QWEN3.embedding.dimensions)
    rerank = {d["text"]: 0.1 * (i + 1) for i, d in enumerate(DOCS)}  # the last document first
    runner.rerank_score = lambda query, text: rerank[text]
    settings = scripted_runner_settings(tmp_path, profile="qwen3")
    settings.qdrant.edge_process = False
    async with app_client(settings, transports=runner.transports) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        assert (await client.post("/v1/collections/kb/documents", json={"documents": DOCS})).status_code == 200
        reranked = await _search(client, mode="hybrid", score_details=True, top_k=4)
        fused = await _search(client, mode="hybrid", rerank={"enabled": False})
        dense = await _search(client, mode="dense", rerank={"enabled": False})
        sparse = await _search(client, mode="sparse", rerank={"enabled": False})
    assert reranked["reranked"] is True
    assert [h["doc_id"] for h in reranked["hits"]] == ["tea", "fox", "chart", "loader"]
    by_id = {name: {h["id"]: h["vector_score"] for h in r["hits"]} for name, r in
             (("fused", fused), ("dense", dense), ("sparse", sparse))}
    for hit in reranked["hits"]:
        assert hit["score"] == hit["rerank_score"] == pytest.approx(rerank[hit["text"]])
        assert hit["vector_score"] == pytest.approx(by_id["fused"][hit["id"]], abs=TOL)
        assert hit["dense_score"] == pytest.approx(by_id["dense"][hit["id"]], abs=TOL)
        assert hit["bm25_score"] == (None if hit["doc_id"] in NO_TERM else pytest.approx(by_id["sparse"][hit["id"]],
                                                                                         abs=TOL))
