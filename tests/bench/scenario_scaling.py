"""Scaling: indexing time and query latency at 1k, 10k and 100k chunks.

One ``ragserve serve --with-worker`` (qwen3 profile on the tiny Qwen3 runners, 1024 dimensions, BM25 on, the
embedded Qdrant Edge store, exact search). For each size:

- **write**: that many chunks with their vectors (structured synthetic vectors and short made-up-word texts,
  ``tests/bench/synthetic.py``) through ``POST /v1/collections/{name}/documents``, 1,000 a request: the API,
  BM25 and the store, everything of indexing but the model, timed request by request;
- **ingest** (sizes up to ``ingest_max``): an ingest job of the same texts as a JSONL file (parse, chunk, embed
  with the runner, BM25, upsert), upload to job succeeded. On 2 shared CPU cores the runner's forward passes set
  its pace, linearly in tokens (``embedding`` scenario), so the largest sizes are left to the write path;
- **search**: ``queries`` searches at concurrency 1, dense and hybrid without rerank, on the written
  collection: the client's round trip and the server's own store stage (``timings_ms.search``).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from tests.bench.bench_api_search import KEY, api_process, search_body
from tests.bench.results import pyplot, table
from tests.bench.synthetic import SyntheticCorpus, prefill, summarize, synthetic_corpus


def jsonl(texts: list[str]) -> bytes:
    return "".join(json.dumps({"_id": f"d{i:07d}", "text": t}) + "\n" for i, t in enumerate(texts)).encode()


def ingest(client: httpx.Client, collection: str, body: bytes) -> dict[str, Any]:
    client.post("/v1/collections", json={"name": collection}).raise_for_status()
    started = time.perf_counter()
    r = client.post(f"/v1/collections/{collection}/ingest", files=[("files", ("scale.jsonl", body))])
    r.raise_for_status()
    job = r.json()
    while job["state"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.2)
        job = client.get(f"/v1/jobs/{job['id']}").json()
    job["wall_s"] = time.perf_counter() - started
    if job["state"] != "succeeded":
        raise RuntimeError(f"job {job['id']} {job['state']}: {job.get('errors')}")
    return job


def searches(client: httpx.Client, collection: str, queries: list[str], mode: str) -> dict[str, Any]:
    for k in range(3):  # warm-up, with queries of its own
        client.post("/v1/search", json={**search_body(f"warm-up {mode} {k}", mode, False), "collection": collection})
    rtt, store = [], []
    for q in queries:
        t = time.perf_counter()
        r = client.post("/v1/search", json={**search_body(q, mode, False), "collection": collection})
        rtt.append((time.perf_counter() - t) * 1000)
        r.raise_for_status()
        store.append(r.json()["timings_ms"]["search"])
    return {"client_ms": summarize(rtt), "store_ms": summarize(store)}


def checkpoint_of(runner_url: str) -> str:
    """The folder the runner loaded (``/v1/models``' ``root``): the indexer's tokenizer must be the model's."""
    r = httpx.get(f"{runner_url}/v1/models", timeout=30)
    r.raise_for_status()
    return str(r.json()["data"][0]["root"])


def first(corpus: SyntheticCorpus, n: int) -> SyntheticCorpus:
    return SyntheticCorpus(corpus.matrix[:n], corpus.texts[:n], corpus.assignment[:n], corpus.words, corpus.topics,
                           corpus.seed)


def measure(*, embed_url: str, rerank_url: str, max_model_len: int = 2048,
            sizes: tuple[int, ...] = (1_000, 10_000, 100_000), ingest_max: int = 1_000,
            queries: int = 50) -> dict[str, Any]:
    corpus = synthetic_corpus(max(sizes), 1024, progress=lambda s: None)
    all_queries = corpus.queries(queries * len(sizes))  # each size its own: the runner caches prompt prefixes
    rows = []
    env = {"RAGSERVE_INDEXER__POLL_S": "0.1", "RAGSERVE_RUNNERS__EMBED_MODEL_PATH": checkpoint_of(embed_url)}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp, \
            api_process(Path(tmp) / "data", embed_url=embed_url, rerank_url=rerank_url, max_model_len=max_model_len,
                        log_path=Path(tmp) / "serve.log", with_worker=True, env_extra=env) as (url, _), \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as client:
        for k, n in enumerate(sizes):
            qs = all_queries[k * queries:(k + 1) * queries]
            name = f"scale-{n}"
            print(f"scaling: writing {n:,} chunks", flush=True)
            client.post("/v1/collections", json={"name": name}).raise_for_status()
            written = prefill(client, name, first(corpus, n), batch=1000, progress=lambda s: None)
            points = client.get(f"/v1/collections/{name}").json()["points"]
            assert points == n, f"{points} points after writing {n} chunks"
            row: dict[str, Any] = {"chunks": n, "write_s": written["request_s"], "write_per_s": written["docs_per_s"]}
            if n <= ingest_max:
                print(f"scaling: ingest job of {n:,} chunks", flush=True)
                job = ingest(client, f"ingest-{n}", jsonl(corpus.texts[:n]))
                row |= {"ingest_s": job["wall_s"], "ingest_per_s": n / job["wall_s"],
                        "ingest_tokens": job["counts"]["tokens"]}
            for mode in ("dense", "hybrid"):
                s = searches(client, name, qs, mode)
                row[f"{mode}_p50"], row[f"{mode}_p99"] = s["client_ms"]["p50"], s["client_ms"]["p99"]
                row[f"{mode}_store_p50"] = s["store_ms"]["p50"]
            print(f"  {n:,}: written in {row['write_s']:.1f}s ({row['write_per_s']:,.0f} chunks/s); dense p50 "
                  f"{row['dense_p50']:.1f} ms, hybrid p50 {row['hybrid_p50']:.1f} ms", flush=True)
            rows.append(row)
    return {"scenario": "scaling", "sizes": list(sizes), "ingest_max": ingest_max, "queries": queries, "rows": rows}


COLUMNS = [("chunks", "chunks", ",d"), ("write_s", "write s", ",.1f"), ("write_per_s", "write chunks/s", ",.0f"),
           ("ingest_s", "ingest job s", ",.1f"), ("ingest_per_s", "ingest chunks/s", ",.0f"),
           ("ingest_tokens", "ingest tokens", ",d"), ("dense_p50", "dense p50 ms", ".1f"), ("dense_p99", "dense p99", ".1f"),
           ("dense_store_p50", "store p50", ".2f"), ("hybrid_p50", "hybrid p50 ms", ".1f"),
           ("hybrid_p99", "hybrid p99", ".1f"), ("hybrid_store_p50", "store p50", ".2f")]


def report(result: dict[str, Any]) -> str:
    return "\n".join(["scaling (tiny Qwen3 runner, 1024 dims, embedded Qdrant Edge, exact search), "
                      f"{result['queries']} searches at c=1 per mode", table(result["rows"], COLUMNS)])


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    rows = result["rows"]
    n = np.asarray([r["chunks"] for r in rows])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    axes[0].plot(n, [r["write_s"] for r in rows], "o-", label="write with vectors (POST /documents)")
    ingested = [r for r in rows if "ingest_s" in r]
    if ingested:
        axes[0].plot([r["chunks"] for r in ingested], [r["ingest_s"] for r in ingested], "s-",
                     label="ingest job (with the tiny runner's embedding)")
    axes[0].plot(n, n / rows[0]["write_per_s"], "--", color="gray", label="linear from the smallest write")
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("chunks")
    axes[0].set_ylabel("seconds")
    axes[0].set_title("indexing time")
    axes[0].legend()
    for mode, colour in (("dense", "tab:blue"), ("hybrid", "tab:orange")):
        axes[1].plot(n, [r[f"{mode}_p50"] for r in rows], "o-", color=colour, label=f"{mode} p50")
        axes[1].plot(n, [r[f"{mode}_p99"] for r in rows], "o:", color=colour, label=f"{mode} p99")
        axes[1].plot(n, [r[f"{mode}_store_p50"] for r in rows], "s--", color=colour, alpha=0.5,
                     label=f"{mode} store stage p50")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("chunks in the collection")
    axes[1].set_ylabel("ms")
    axes[1].set_title("/v1/search latency at concurrency 1")
    axes[1].legend(fontsize=8)
    fig.suptitle("Scaling: tiny Qwen3 runner, embedded Qdrant Edge (exact search)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
