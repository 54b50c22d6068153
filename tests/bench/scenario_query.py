"""Query latency: ``/v1/search`` (dense and hybrid, rerank off and on) against the sum of its stages called
directly, one after the other, by this process: the embedding runner's ``/v1/embeddings`` (the same body and
base64 decoding as ragserve's client), a Qdrant Edge shard's query (``EdgeStore`` in this process, on a copy of
the very folder the API serves) and the reranker runner's ``/rerank``. The difference is the service's own
overhead: HTTP in and out, auth, validation, the store's own process (``RAGSERVE_QDRANT__EDGE_PROCESS``),
lanes, JSON of the hits.

At concurrency 1 a query goes through the API, then another through the stages directly, so both see the same
machine (each path has its own half of the queries: the Qwen3 runners cache prompt prefixes, and a repeated
query would be served from the cache its first run left); at concurrency ``C`` (32) the API and the direct stages each get ``duration`` seconds of ``C`` closed-
loop clients, one after the other. The API is ``ragserve serve`` in its own process (``tests/bench/
bench_api_search.py: api_process``, qwen3 profile on the tiny Qwen3 runners), filled through ``POST /documents``
with structured synthetic vectors and texts (``tests/bench/synthetic.py``), then stopped, its store folder
copied for the direct path, and started again on the original.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.config import Settings
from service.profiles import QWEN3
from service.search.service import DEFAULT_RERANK_CANDIDATES
from service.sparse.bm25 import encoder
from service.store.edge import EdgeStore
from service.store.types import CollectionInfo, Fusion
from tests.bench.bench_api_search import COLLECTION, KEY, api_process, search_body
from tests.bench.results import pyplot, ratio, table
from tests.bench.synthetic import SyntheticCorpus, prefill, summarize, synthetic_corpus

CONFIGS = [("dense", False), ("hybrid", False), ("dense", True), ("hybrid", True)]
UPSTREAM = Settings().upstream


@dataclass
class Stack:
    api_url: str
    embed_url: str
    rerank_url: str
    max_model_len: int
    store: EdgeStore
    info: CollectionInfo
    fusion: Fusion
    corpus: SyntheticCorpus
    prefill: dict[str, Any]


@contextmanager
def served(points: int, *, embed_url: str, rerank_url: str, max_model_len: int, tmp: Path,
           dims: int = QWEN3.embedding.dimensions) -> Iterator[tuple[str, Path, SyntheticCorpus, dict[str, Any]]]:
    """``ragserve serve`` on a collection of ``points`` synthetic points; yields its URL, a copy of its store
    folder made while it was stopped, the corpus and the prefill's figures."""
    corpus = synthetic_corpus(points, dims)
    data, copy = tmp / "data", tmp / "direct"
    kwargs = {"embed_url": embed_url, "rerank_url": rerank_url, "max_model_len": max_model_len}
    with api_process(data, log_path=tmp / "serve-fill.log", **kwargs) as (url, _):
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as client:
            client.post("/v1/collections", json={"name": COLLECTION, "dimensions": dims}).raise_for_status()
            filled = prefill(client, COLLECTION, corpus, batch=1000, progress=lambda s: None)
    shutil.copytree(data / "qdrant", copy)
    with api_process(data, log_path=tmp / "serve.log", **kwargs) as (url, _):
        yield url, copy, corpus, filled


def embed_body(query: str, max_model_len: int) -> dict[str, Any]:
    """What ``EmbeddingClient.embed_query`` sends."""
    model = QWEN3.embedding
    return {"model": model.name, "input": [model.format_query(query)], "encoding_format": "base64",
            "truncate_prompt_tokens": min(model.max_tokens, max_model_len)}


def rerank_body(query: str, documents: list[str], max_model_len: int) -> dict[str, Any]:
    """What ``RerankClient.rerank`` sends for documents that fit the window (no cut asked: the synthetic texts
    are short)."""
    model = QWEN3.reranker
    assert model is not None
    return {"model": model.name, "query": query, "documents": documents, "top_n": len(documents),
            "chat_template_kwargs": {"instruction": model.default_instruction}}


async def direct_search(s: Stack, runner: httpx.AsyncClient, query: str, mode: str, rerank: bool,
                        top_k: int = 10) -> dict[str, float]:
    """The stages of one search, called in sequence; milliseconds of each and their sum. Each runner call has the
    deadline ragserve gives it (``RAGSERVE_UPSTREAM__EMBED_TIMEOUT_S``, ``..._RERANK_TIMEOUT_S``), so that under
    overload both paths give up at the same point instead of this one queueing without end."""
    out: dict[str, float] = {}
    t = time.perf_counter()
    r = await runner.post(f"{s.embed_url}/v1/embeddings", json=embed_body(query, s.max_model_len),
                          timeout=UPSTREAM.embed_timeout_s)
    r.raise_for_status()
    vector = np.frombuffer(base64.b64decode(r.json()["data"][0]["embedding"]), dtype="<f4").tolist()
    out["embed"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    sparse = encoder(s.info.sparse).encode_query(query) if mode == "hybrid" and s.info.sparse else None
    limit = max(top_k, DEFAULT_RERANK_CANDIDATES) if rerank else top_k
    hits = await s.store.query(COLLECTION, dense=vector, sparse=sparse if sparse and sparse.indices else None,
                               limit=limit, fusion=s.fusion)
    out["search"] = (time.perf_counter() - t) * 1000
    if rerank:
        t = time.perf_counter()
        r = await runner.post(f"{s.rerank_url}/rerank", json=rerank_body(query, [h.text for h in hits],
                                                                          s.max_model_len),
                              timeout=UPSTREAM.rerank_timeout_s)
        r.raise_for_status()
        assert len(r.json()["results"]) == len(hits)
        out["rerank"] = (time.perf_counter() - t) * 1000
    out["total"] = sum(out.values())
    return out


async def api_search(api: httpx.AsyncClient, query: str, mode: str, rerank: bool) -> dict[str, float]:
    t = time.perf_counter()
    r = await api.post("/v1/search", json=search_body(query, mode, rerank))
    ms = (time.perf_counter() - t) * 1000
    if r.status_code != 200:
        raise RuntimeError(f"{r.status_code} {r.text[:200]}")
    body = r.json()
    return {"total": ms, **{f"server_{k}": v for k, v in body["timings_ms"].items()}}


async def sequential(s: Stack, api: httpx.AsyncClient, runner: httpx.AsyncClient, queries: list[str], mode: str,
                     rerank: bool) -> dict[str, Any]:
    """Query by query, the API and then the stages directly, each on its own half of ``queries``: the runners
    cache prompt prefixes (vLLM's prefix caching, on for the Qwen3 runners), so the second of two identical
    requests would be served from the first one's cache."""
    api_q, direct_q = queries[0::2], queries[1::2]
    for k in range(3):  # warm-up, with queries of its own; a failure here is counted by the runs below
        with suppress(RuntimeError, httpx.HTTPError):
            await api_search(api, f"warm-up {mode} {rerank} api {k}", mode, rerank)
            await direct_search(s, runner, f"warm-up {mode} {rerank} direct {k}", mode, rerank)
    api_ms: list[dict[str, float]] = []
    direct_ms: list[dict[str, float]] = []
    errors = direct_errors = 0
    first: list[str] = []
    for a, d in zip(api_q, direct_q, strict=True):
        try:
            api_ms.append(await api_search(api, a, mode, rerank))
        except (RuntimeError, httpx.HTTPError) as exc:
            errors += 1
            first.append(f"API: {exc!r}")
        try:
            direct_ms.append(await direct_search(s, runner, d, mode, rerank))
        except httpx.HTTPError as exc:
            direct_errors += 1
            first.append(f"direct: {exc!r}")
    if not api_ms or not direct_ms:
        raise RuntimeError(f"{mode} rerank {rerank}: every search failed ({errors} API, {direct_errors} direct): "
                           + "; ".join(first[:4]))
    return {"api": {k: stats([x[k] for x in api_ms if k in x]) for k in api_ms[0]},
            "direct": {k: stats([x[k] for x in direct_ms]) for k in direct_ms[0]}, "api_errors": errors,
            "direct_errors": direct_errors}


def stats(values: list[float]) -> dict[str, float]:
    """``summarize`` (p50 / p90 / p99 / max / mean) and p95."""
    return {**summarize(values), "p95": float(np.percentile(values, 95)) if values else 0.0}


async def closed_loop(call: Any, queries: list[str], concurrency: int, duration_s: float) -> dict[str, Any]:
    """``concurrency`` clients, each sending its next query as soon as its last one answered."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    counter = 0
    await asyncio.gather(*(call(q) for q in queries[:concurrency]), return_exceptions=True)  # connections open
    deadline = time.perf_counter() + duration_s

    async def client() -> None:
        nonlocal counter
        while time.perf_counter() < deadline:
            q = queries[counter % len(queries)]
            counter += 1
            t = time.perf_counter()
            try:
                await call(q)
            except (RuntimeError, httpx.HTTPError) as exc:
                kind = str(exc)[:3] if isinstance(exc, RuntimeError) else type(exc).__name__
                errors[kind] = errors.get(kind, 0) + 1
                continue
            latencies.append((time.perf_counter() - t) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    lat = stats(latencies)
    return {"ok": len(latencies), "errors": sum(errors.values()), "error_kinds": errors,
            "throughput_rps": len(latencies) / wall, "latency_ms": lat,
            "p99_over_p50": lat["p99"] / lat["p50"] if lat["p50"] else None}


async def run_all(s: Stack, *, queries: list[str], n_seq: int, n_seq_rerank: int, concurrency: int,
                  duration_s: float, configs: list[tuple[str, bool]],
                  concurrent_configs: list[tuple[str, bool]]) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(httpx.AsyncClient(
            base_url=s.api_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120, limits=limits))
        runner = await stack.enter_async_context(httpx.AsyncClient(timeout=120, limits=limits))
        seq, conc = [], []
        for mode, rerank in configs:
            n = n_seq_rerank if rerank else n_seq
            print(f"  c=1 {mode} rerank {'on' if rerank else 'off'}: {n} queries each way", flush=True)
            seq.append({"mode": mode, "rerank": rerank, "queries": n,
                        **await sequential(s, api, runner, queries[:2 * n], mode, rerank)})
        for mode, rerank in concurrent_configs:
            print(f"  c={concurrency} {mode} rerank {'on' if rerank else 'off'}: {duration_s:g}s API, "
                  f"{duration_s:g}s direct", flush=True)
            a = await closed_loop(lambda q, m=mode, r=rerank: api_search(api, q, m, r), queries[0::2],
                                  concurrency, duration_s)
            d = await closed_loop(lambda q, m=mode, r=rerank: direct_search(s, runner, q, m, r), queries[1::2],
                                  concurrency, duration_s)
            conc.append({"mode": mode, "rerank": rerank, "api": a, "direct": d})
    return {"sequential": seq, "concurrent": conc}


def measure(*, embed_url: str, rerank_url: str, max_model_len: int = 2048, points: int = 10_000,
            n_seq: int = 60, n_seq_rerank: int = 6, concurrency: int = 32, duration_s: float = 10.0,
            configs: list[tuple[str, bool]] | None = None,
            concurrent_configs: list[tuple[str, bool]] | None = None) -> dict[str, Any]:
    configs = configs or CONFIGS
    concurrent_configs = configs if concurrent_configs is None else concurrent_configs
    ss = Settings().search
    fusion = Fusion(ss.fusion, ss.prefetch_limit, ss.rrf_k, ss.dense_weight, ss.sparse_weight)
    print(f"query latency: {points:,} points, c=1 and c={concurrency}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-query-") as tmp, \
            served(points, embed_url=embed_url, rerank_url=rerank_url, max_model_len=max_model_len,
                   tmp=Path(tmp)) as (url, copy, corpus, filled):
        queries = corpus.queries(max(2 * n_seq, 1000))

        async def go() -> dict[str, Any]:
            store = await EdgeStore.open(copy)
            try:
                s = Stack(url, embed_url, rerank_url, max_model_len, store, await store.describe(COLLECTION),
                          fusion, corpus, filled)
                return await run_all(s, queries=queries, n_seq=n_seq, n_seq_rerank=n_seq_rerank,
                                     concurrency=concurrency, duration_s=duration_s, configs=configs,
                                     concurrent_configs=concurrent_configs)
            finally:
                await store.aclose()

        result = asyncio.run(go())
    rows = []
    for r in result["sequential"]:
        a, d = r["api"]["total"], r["direct"]["total"]
        rows.append({"config": f"{r['mode']}{' + rerank' if r['rerank'] else ''}", "c": 1,
                     "api_p50": a["p50"], "api_p95": a["p95"], "api_p99": a["p99"],
                     "direct_p50": d["p50"], "direct_p99": d["p99"],
                     "overhead_p50": ratio(a["p50"] - d["p50"], d["p50"]), "errors": r["api_errors"],
                     **{f"stage_{k}": v["p50"] for k, v in r["direct"].items() if k != "total"}})
    for r in result["concurrent"]:
        a, d = r["api"], r["direct"]
        rows.append({"config": f"{r['mode']}{' + rerank' if r['rerank'] else ''}", "c": concurrency,
                     "api_p50": a["latency_ms"]["p50"], "api_p95": a["latency_ms"]["p95"],
                     "api_p99": a["latency_ms"]["p99"], "direct_p50": d["latency_ms"]["p50"],
                     "direct_p99": d["latency_ms"]["p99"],
                     "overhead_p50": ratio(a["latency_ms"]["p50"] - d["latency_ms"]["p50"], d["latency_ms"]["p50"]),
                     "errors": a["errors"], "api_rps": a["throughput_rps"], "direct_rps": d["throughput_rps"],
                     "p99_over_p50": a["p99_over_p50"]})
    conc_rows = [r for r in rows if r["c"] == concurrency]
    targets = {
        "overhead_p50_c1": {r["config"]: r["overhead_p50"] for r in rows if r["c"] == 1},
        "overhead_p50_c1_met": all((r["overhead_p50"] or 0) <= 0.10 for r in rows if r["c"] == 1),
        "c_errors": sum(r["errors"] for r in conc_rows),
        "c_p99_over_p50": {r["config"]: r["p99_over_p50"] for r in conc_rows},
        "c_met": all(r["errors"] == 0 and (r["p99_over_p50"] or 99) <= 3 for r in conc_rows),
    }
    return {"scenario": "query", "points": points, "dims": QWEN3.embedding.dimensions, "concurrency": concurrency,
            "duration_s": duration_s, "prefill": filled, "rows": rows, "targets": targets, **result}


COLUMNS = [("config", "config", ""), ("c", "c", "d"), ("api_p50", "API p50", ".1f"), ("api_p95", "p95", ".1f"),
           ("api_p99", "p99", ".1f"), ("direct_p50", "stages p50", ".1f"), ("direct_p99", "stages p99", ".1f"),
           ("overhead_p50", "overhead p50", "+.1%"), ("errors", "errors", "d"), ("api_rps", "API req/s", ".1f"),
           ("direct_rps", "stages req/s", ".1f"), ("p99_over_p50", "p99/p50", ".2f")]


def report(result: dict[str, Any]) -> str:
    lines = [f"query latency, {result['points']:,} points x {result['dims']} dims (tiny Qwen3 runners), ms; "
             "stages = embed + store query + rerank called directly in sequence", table(result["rows"], COLUMNS)]
    stage_rows = [r for r in result["rows"] if r["c"] == 1]
    lines.append("stage p50s at c=1 (direct): " + "; ".join(
        f"{r['config']}: " + ", ".join(f"{k[6:]} {v:.1f}" for k, v in r.items() if k.startswith("stage_"))
        for r in stage_rows))
    t = result["targets"]
    lines.append(f"targets: overhead <= 10% at p50, c=1: {'met' if t['overhead_p50_c1_met'] else 'NOT met'}; "
                 f"c={result['concurrency']}: {t['c_errors']} errors, p99/p50 "
                 + ", ".join(f"{k} {v:.2f}" for k, v in t["c_p99_over_p50"].items() if v is not None)
                 + f" -> {'met' if t['c_met'] else 'NOT met'}")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, c in zip(axes, (1, result["concurrency"]), strict=True):
        rows = [r for r in result["rows"] if r["c"] == c]
        x = np.arange(len(rows))
        for off, key, label, colour in ((-0.3, "api_p50", "API p50", "tab:blue"),
                                        (-0.1, "api_p99", "API p99", "tab:cyan"),
                                        (0.1, "direct_p50", "stages p50", "tab:gray"),
                                        (0.3, "direct_p99", "stages p99", "silver")):
            ax.bar(x + off, [r[key] for r in rows], width=0.2, label=label, color=colour)
        for i, r in enumerate(rows):
            if r["overhead_p50"] is not None:
                ax.text(i, max(r["api_p99"], r["direct_p99"]), f"{r['overhead_p50']:+.0%}", ha="center",
                        va="bottom", fontsize=9)
        ax.set_xticks(x, [r["config"] for r in rows])
        ax.set_yscale("log")
        ax.set_ylabel("ms (log scale)")
        ax.set_title(f"concurrency {c} (label: API overhead at p50)")
        ax.legend(fontsize=8)
    fig.suptitle(f"/v1/search against its stages called directly, {result['points']:,} points")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
