"""Offline fusion (what tune-fusion scores) equals the service's own hybrid search for the same setting."""

from __future__ import annotations

import pytest

from service.client import AsyncClient
from service.config import Settings
from service.evaluation.tuning import Setting, candidate_lists, fuse, grid
from tests.support.app import app_client

DOCS = [{"id": f"d{i}", "text": t} for i, t in enumerate([
    "Gene expression in tumour cells changes after radiation therapy.",
    "Radiation exposure raises cancer risk in children.",
    "Cells repair DNA damage through homologous recombination.",
    "Tumour suppressor genes such as TP53 prevent uncontrolled growth.",
    "Vitamin D levels correlate with bone density in adults.",
    "Exercise improves insulin sensitivity and glucose control.",
    "Radiotherapy schedules differ for breast and prostate tumours.",
])]


@pytest.mark.parametrize("setting", [Setting("rrf", 100, 2, 1.0, 1.0), Setting("rrf", 100, 60, 1.0, 2.0),
                                     Setting("rrf", 3, 10, 2.0, 1.0), Setting("dbsf", 100)])
async def test_offline_fusion_matches_the_service(minilm_settings: Settings, setting: Setting) -> None:
    s = minilm_settings.search
    s.fusion, s.prefetch_limit = setting.fusion, setting.prefetch_limit  # type: ignore[assignment]
    s.rrf_k, s.dense_weight, s.sparse_weight = setting.rrf_k or 60, setting.dense_weight, setting.sparse_weight
    queries = {"q1": "radiation and tumour genes", "q2": "DNA repair in cells", "q3": "glucose"}
    async with app_client(minilm_settings) as client:
        await client.post("/v1/collections", json={"name": "c"})
        await client.post("/v1/collections/c/documents", json={"documents": DOCS})
        lists = await candidate_lists(AsyncClient(http_client=client), "c", queries, depth=len(DOCS))
        served = {}
        for qid, text in queries.items():
            r = await client.post("/v1/search", json={"collection": "c", "query": text, "top_k": len(DOCS),
                                                      "mode": "hybrid", "rerank": {"enabled": False}})
            served[qid] = [(h["doc_id"], h["vector_score"]) for h in r.json()["hits"]]
    for qid in queries:
        fused = fuse(setting, lists[qid]["dense"], lists[qid]["sparse"], limit=len(DOCS))
        offline = [(p.payload["doc_id"], p.score) for p in fused]  # type: ignore[index]
        assert [d for d, _ in offline] == [d for d, _ in served[qid]][: len(offline)]
        # the engine fuses in float32, qdrant-client's offline code in float64
        assert [x for _, x in offline] == pytest.approx([x for _, x in served[qid]][: len(offline)], abs=1e-5)


def test_grid_covers_both_fusions() -> None:
    settings = grid()
    assert {s.fusion for s in settings} == {"rrf", "dbsf"} and len(settings) > 40
    assert "RAGSERVE_SEARCH__RRF_K=" in Setting("rrf", 50, 20, 1.0, 1.5).env()


def test_fuse_does_not_mutate_its_inputs() -> None:
    from qdrant_client.http import models

    dense = [models.ScoredPoint(id=i, version=0, score=1.0 - i / 10, payload={"doc_id": str(i)}) for i in range(3)]
    fuse(Setting("rrf", 10, 2), dense, dense[::-1])
    assert [p.score for p in dense] == [1.0, 0.9, 0.8]


async def test_candidate_lists_tolerate_stopword_only_queries(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        await client.post("/v1/collections", json={"name": "c"})
        await client.post("/v1/collections/c/documents", json={"documents": DOCS})
        lists = await candidate_lists(AsyncClient(http_client=client), "c", {"q": "the of and"}, depth=3)
    assert lists["q"]["sparse"] == [] and len(lists["q"]["dense"]) == 3
    assert isinstance(lists["q"]["dense"][0].score, float)
