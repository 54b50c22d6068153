"""Where a search's own CPU goes inside ragserve, layer by layer, in one process (no sockets, no runner): the
embedding runner is an ``httpx.MockTransport`` answering a fixed 1024-dim vector at once, the store is Qdrant
Edge in this process (500 points), and each layer is timed alone, 300 calls after 20 of warm-up:

- an ``httpx`` POST to the mock transport and its ``.json()`` (the client library's own cost per runner call);
- ``EmbeddingClient.embed_query`` (lanes, pool, deadline, retries, base64 decode on top of that);
- ``VectorStore.query`` (the engine, through its executor);
- ``SearchService.search`` (describe, embed, store, tracing spans, stage metrics);
- ``GET /health`` and ``POST /v1/search`` through the whole ASGI app (middleware, auth, body reading and
  validation, the response model, JSON), over httpx's ASGI transport.

``/v1/search`` less ``SearchService.search`` is what the API layer adds; ``/health`` is its floor.

    python -m tests.bench.bench_overhead
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.config import Settings
from service.search.service import SearchQuery
from tests.bench.synthetic import synthetic_corpus
from tests.support.app import API_KEY, app_client

DIMS = 1024


def _embedding_body() -> bytes:
    v = np.random.default_rng(0).standard_normal(DIMS).astype("<f4")
    v /= np.linalg.norm(v)
    return json.dumps({"object": "list", "model": "Qwen/Qwen3-Embedding-0.6B",
                       "data": [{"object": "embedding", "index": 0,
                                 "embedding": base64.b64encode(v.tobytes()).decode()}],
                       "usage": {"prompt_tokens": 8, "total_tokens": 8}}).encode()


BODY = _embedding_body()


def _runner(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=BODY, headers={"content-type": "application/json"})


async def timed(call: Callable[[], Awaitable[Any]], n: int = 300, warmup: int = 20) -> dict[str, float]:
    """CPU and wall milliseconds per call, over ``n`` calls in sequence."""
    for _ in range(warmup):
        await call()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        await call()
    return {"cpu_ms": (time.process_time() - cpu) * 1000 / n, "wall_ms": (time.perf_counter() - wall) * 1000 / n}


async def measure(n: int = 300) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    async with httpx.AsyncClient(transport=httpx.MockTransport(_runner)) as http:
        async def post() -> Any:
            return (await http.post("http://runner.test/v1/embeddings", json={"input": ["q"], "model": "m"})).json()
        out["httpx post + json (mock)"] = await timed(post, n)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(profile="qwen3", data_dir=Path(tmp), api_keys=[API_KEY], generation={"enabled": False},
                            qdrant={"edge_process": False}, query_cache={"max_bytes": 0},  # the same query n times
                            runners={"embed_url": "http://embed.test", "rerank_url": "http://rerank.test"})
        async with app_client(settings, transports={"embedding": httpx.MockTransport(_runner)}) as client:
            (await client.post("/v1/collections", json={"name": "kb", "dimensions": DIMS})).raise_for_status()
            corpus = synthetic_corpus(500, DIMS)
            docs = [{"id": f"p{i}", "text": corpus.texts[i], "vector_base64": b}
                    for i, b in zip(range(500), corpus.vectors_base64(0, 500), strict=True)]
            (await client.post("/v1/collections/kb/documents", json={"documents": docs})).raise_for_status()
            services = client.services  # type: ignore[attr-defined]
            vector = await services.embedder.embed_query("q", dimensions=DIMS)
            query = SearchQuery(collection="kb", query="what is x", top_k=10, mode="dense", rerank=False)
            body = {"collection": "kb", "query": "what is x", "top_k": 10, "mode": "dense", "rerank": {"enabled": False}}
            out["EmbeddingClient.embed_query"] = await timed(
                lambda: services.embedder.embed_query("what is x", dimensions=DIMS), n)
            out["store.query (Edge in-process, 500 pts)"] = await timed(
                lambda: services.store.query("kb", dense=vector, sparse=None, limit=10), n)
            out["SearchService.search (dense)"] = await timed(lambda: services.search.search(query), n)
            out["ASGI GET /health"] = await timed(lambda: client.get("/health"), n)
            out["ASGI POST /v1/search (dense)"] = await timed(lambda: client.post("/v1/search", json=body), n)
    return out


def report(result: dict[str, dict[str, float]]) -> str:
    lines = [f"{'layer':42s} {'cpu ms':>8s} {'wall ms':>8s}"]
    lines += [f"{k:42s} {v['cpu_ms']:8.3f} {v['wall_ms']:8.3f}" for k, v in result.items()]
    api = result["ASGI POST /v1/search (dense)"]["cpu_ms"] - result["SearchService.search (dense)"]["cpu_ms"]
    lines.append(f"API layer over SearchService.search: {api:.3f} ms CPU per search")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
