"""``ragserve eval``: index a BEIR corpus through the API if the collection is empty, run every query of a
split through ``POST /v1/search`` (the path users take), and score the results."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np

from service.client import AsyncClient, Document
from service.client.api import Mode
from service.evaluation.dataset import BeirDataset
from service.evaluation.metrics import Run, evaluate

Fusion = Literal["rrf", "dbsf"] | None


@dataclass
class EvalReport:
    mode: str
    metrics: dict[str, float]
    latency_ms: dict[str, float]
    queries: int
    extra: dict[str, Any] = field(default_factory=dict)


async def ensure_indexed(
    client: AsyncClient, dataset: BeirDataset, collection: str, *, batch_size: int = 256,
    concurrency: int = 1, progress: bool = True,
) -> int:
    """Create ``collection`` and upsert the corpus through the documents endpoint, unless it holds points."""
    if (await client.ensure_collection(collection)).points > 0:
        return 0
    docs = [Document(d["id"], d["text"], d.get("metadata") or {}) for d in dataset.corpus()]
    slots = asyncio.Semaphore(concurrency)
    done = 0
    started = time.monotonic()

    async def send(batch: list[Document]) -> None:
        nonlocal done
        async with slots:
            await client.upsert_documents(collection, batch)
        done += len(batch)
        if progress:
            rate = done / max(time.monotonic() - started, 1e-9)
            print(f"\rindexed {done}/{len(docs)} documents ({rate:.0f}/s)", end="", flush=True)

    it = iter(docs)
    await asyncio.gather(*(send(list(b)) for b in iter(lambda: list(itertools.islice(it, batch_size)), [])))
    if progress:
        print()
    return len(docs)


async def run_queries(
    client: AsyncClient, queries: dict[str, str], collection: str, *, top_k: int = 100,
    mode: str | None = None, rerank: bool = False, concurrency: int = 4,
) -> tuple[Run, list[float]]:
    slots = asyncio.Semaphore(concurrency)
    run: Run = {}
    latencies: list[float] = []

    name, _, fusion = (mode or "").partition(":")  # "hybrid:dbsf" names a fusion too

    async def one(qid: str, text: str) -> None:
        async with slots:
            t = time.perf_counter()
            result = await client.search(collection, text, top_k=top_k, rerank=rerank,
                                         mode=cast(Mode, name or None), fusion=cast(Fusion, fusion or None))
            latencies.append((time.perf_counter() - t) * 1000)
        scores: dict[str, float] = {}
        for hit in result.hits:  # chunks -> documents: a document scores as its best chunk
            scores[hit.doc_id] = max(scores.get(hit.doc_id, float("-inf")), hit.score)
        run[qid] = scores

    await asyncio.gather(*(one(q, t) for q, t in queries.items()))
    return run, latencies


def percentiles(latencies: list[float]) -> dict[str, float]:
    arr = np.asarray(latencies)
    return {f"p{p}": round(float(np.percentile(arr, p)), 2) for p in (50, 90, 99)}


async def evaluate_service(
    url: str, api_key: str, dataset: BeirDataset, collection: str, *, split: str = "test",
    modes: list[str | None] | None = None, rerank: bool = False, top_k: int = 100, progress: bool = True,
    timeout_s: float = 300.0,
) -> list[EvalReport]:
    async with AsyncClient(url, api_key, timeout=timeout_s) as client:
        await ensure_indexed(client, dataset, collection, progress=progress)
        qrels = dataset.qrels(split)
        queries = dataset.queries(split)
        reports = []
        for mode in modes or [None]:
            run, latencies = await run_queries(client, queries, collection, top_k=top_k, mode=mode, rerank=rerank)
            reports.append(EvalReport(mode or "default", evaluate(qrels, run), percentiles(latencies), len(queries)))
        return reports


def format_table(reports: list[EvalReport]) -> str:
    cols = ["ndcg@10", "recall@10", "recall@100", "mrr@10"]
    lines = [f"{'mode':<10}" + "".join(f"{c:>12}" for c in cols) + f"{'p50 ms':>10}{'p99 ms':>10}"]
    for r in reports:
        lines.append(f"{r.mode:<10}" + "".join(f"{r.metrics[c]:>12.4f}" for c in cols)
                     + f"{r.latency_ms['p50']:>10.1f}{r.latency_ms['p99']:>10.1f}")
    return "\n".join(lines)
