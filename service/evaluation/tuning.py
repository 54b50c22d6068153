"""``ragserve tune-fusion``: choose hybrid fusion settings on a *training* split.

Dense and sparse candidate lists are fetched once per query through the running service
(``POST /v1/search`` with ``mode`` dense and sparse), then every setting of the grid is fused with
qdrant-client's own RRF/DBSF functions (the ones its local mode runs; the server implements the same
formulas) and scored with nDCG@10. Only the split you name is used: tune on train, report on test.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from qdrant_client.http import models
from qdrant_client.hybrid.fusion import distribution_based_score_fusion, reciprocal_rank_fusion

from service.client import AsyncClient, InvalidRequest, SearchHit
from service.evaluation.dataset import BeirDataset
from service.evaluation.metrics import evaluate
from service.evaluation.run import ensure_indexed

RRF_K = (2, 10, 20, 40, 60, 100)
WEIGHTS = ((1.0, 1.0), (1.0, 1.5), (1.5, 1.0), (1.0, 2.0), (2.0, 1.0), (1.0, 3.0), (3.0, 1.0))
PREFETCH = (100,)
"""The service prefetches max(top_k, prefetch_limit) per list, and evaluation asks for top_k=100."""


@dataclass(frozen=True)
class Setting:
    fusion: str
    prefetch_limit: int
    rrf_k: int | None = None
    dense_weight: float = 1.0
    sparse_weight: float = 1.0

    def env(self) -> str:
        parts = [f"RAGSERVE_SEARCH__FUSION={self.fusion}", f"RAGSERVE_SEARCH__PREFETCH_LIMIT={self.prefetch_limit}"]
        if self.fusion == "rrf":
            parts += [f"RAGSERVE_SEARCH__RRF_K={self.rrf_k}", f"RAGSERVE_SEARCH__DENSE_WEIGHT={self.dense_weight:g}",
                      f"RAGSERVE_SEARCH__SPARSE_WEIGHT={self.sparse_weight:g}"]
        return " ".join(parts)


def _points(hits: list[SearchHit]) -> list[models.ScoredPoint]:
    return [models.ScoredPoint(id=h.id, version=0, score=h.vector_score, payload={"doc_id": h.doc_id}) for h in hits]


def fuse(setting: Setting, dense: list[models.ScoredPoint], sparse: list[models.ScoredPoint],
         limit: int = 100) -> list[models.ScoredPoint]:
    """What the service returns for ``limit`` hits: each list cut at max(limit, prefetch_limit), fused."""
    depth = max(limit, setting.prefetch_limit)
    lists = [[p.model_copy() for p in dense[:depth]], [p.model_copy() for p in sparse[:depth]]]
    if setting.fusion == "dbsf":
        return distribution_based_score_fusion(lists, limit=limit)
    return reciprocal_rank_fusion(lists, limit=limit, ranking_constant_k=setting.rrf_k,
                                  weights=[setting.dense_weight, setting.sparse_weight])


def grid() -> list[Setting]:
    out = [Setting("dbsf", p) for p in PREFETCH]
    out += [Setting("rrf", p, k, w[0], w[1]) for p, k, w in itertools.product(PREFETCH, RRF_K, WEIGHTS)]
    return out


async def candidate_lists(client: AsyncClient, collection: str, queries: dict[str, str],
                          depth: int = 100, concurrency: int = 4) -> dict[str, dict[str, list[models.ScoredPoint]]]:
    slots = asyncio.Semaphore(concurrency)
    out: dict[str, dict[str, list[models.ScoredPoint]]] = {}

    async def one(qid: str, text: str) -> None:
        lists = {}
        for mode in ("dense", "sparse"):
            try:
                async with slots:
                    result = await client.search(collection, text, top_k=depth, mode=mode, rerank=False)
            except InvalidRequest as exc:
                if exc.code != "empty_sparse_query":  # a query with no searchable terms (sparse only)
                    raise
                lists[mode] = []
                continue
            lists[mode] = _points(result.hits)
        out[qid] = lists

    await asyncio.gather(*(one(q, t) for q, t in queries.items()))
    return out


def score(setting: Setting, lists: dict[str, dict[str, list[models.ScoredPoint]]],
          qrels: dict[str, dict[str, int]]) -> float:
    run = {}
    for qid, pair in lists.items():
        fused = fuse(setting, pair["dense"], pair["sparse"])
        run[qid] = {p.payload["doc_id"]: float(p.score) for p in fused}  # type: ignore[index]
    return evaluate(qrels, run)["ndcg@10"]


async def tune(url: str, api_key: str, dataset: BeirDataset, collection: str, *, split: str = "train",
               progress: bool = True) -> list[tuple[Setting, float]]:
    async with AsyncClient(url, api_key, timeout=300) as client:
        await ensure_indexed(client, dataset, collection, progress=progress)
        qrels = dataset.qrels(split)
        lists = await candidate_lists(client, collection, dataset.queries(split))
    results = [(s, score(s, lists, qrels)) for s in grid()]
    return sorted(results, key=lambda r: r[1], reverse=True)
