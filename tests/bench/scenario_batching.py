"""Batching: requests cut by a token budget (the indexer's way, ``RAGSERVE_INDEXER__BATCH_TOKENS``, as TEI's
``--max-batch-tokens``) against requests of a fixed number of chunks, on a corpus of mixed lengths.

The corpus: SciFact documents in four groups, chunked by ragserve's chunker at 24, 64, 128 and the window's
full 254 tokens, shuffled with a fixed seed, so one request may hold ten short chunks or ten full windows.
Every strategy sends the same chunks straight to the runner's ``/v1/embeddings`` with as many requests in
flight as the indexer's bulk lane allows (``RAGSERVE_UPSTREAM__BULK_MAX_INFLIGHT``, default 2). The strategies
run in rounds, in a different order each round, and each keeps its best round: a machine that others load
too then favours none of them. Besides tokens/s, each request's latency is kept: a search waits behind at
most the bulk requests already in the runner, so the largest request is the query path's worst wait.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from indexer.chunking import Chunker
from indexer.documents import SourceFile
from indexer.parsers import parse
from indexer.tokenizer import load_tokenizer
from service.config import Settings
from service.profiles import MINILM, EmbeddingModel, default_checkpoint
from tests.bench.bench_indexing import sample_corpus
from tests.bench.results import pyplot, table

SIZES = (24, 64, 128, 254)


def mixed_chunks(docs: int, seed: int = 5) -> tuple[list[str], list[int]]:
    tok = load_tokenizer(default_checkpoint(MINILM.embedding))
    parsed = parse(SourceFile("corpus.jsonl", sample_corpus(docs)))
    pairs: list[tuple[str, int]] = []
    for i, doc in enumerate(parsed):
        chunker = Chunker(tok, window=MINILM.embedding.max_tokens, size=SIZES[i % len(SIZES)], overlap=0)
        pairs += [(c.text, c.tokens) for c in chunker.chunk(doc, split=True)]
    random.Random(seed).shuffle(pairs)
    return [t for t, _ in pairs], [n for _, n in pairs]


def by_count(counts: list[int], n: int) -> list[range]:
    return [range(i, min(i + n, len(counts))) for i in range(0, len(counts), n)]


def by_tokens(counts: list[int], budget: int) -> list[range]:
    """The indexer's packing (``Pipeline._embed``): a request takes chunks until the next would pass
    ``budget``."""
    groups, start, used = [], 0, 0
    for i, n in enumerate(counts):
        if i > start and used + n > budget:
            groups.append(range(start, i))
            start, used = i, 0
        used += n
    groups.append(range(start, len(counts)))
    return groups


async def send(url: str, texts: list[str], groups: list[range], inflight: int,
               model: EmbeddingModel) -> tuple[float, list[float]]:
    """Wall seconds for all ``groups`` and each request's milliseconds."""
    request_ms: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        slots = asyncio.Semaphore(inflight)

        async def one(g: range) -> None:
            async with slots:
                t = time.perf_counter()
                r = await client.post("/v1/embeddings", json={
                    "model": model.name, "input": texts[g.start:g.stop], "encoding_format": "base64",
                    "truncate_prompt_tokens": model.max_tokens})
                r.raise_for_status()
                request_ms.append((time.perf_counter() - t) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(one(g) for g in groups))
        return time.perf_counter() - started, request_ms


def measure(*, url: str, docs: int, rounds: int = 2, counts_grid: tuple[int, ...] = (16, 32, 64, 128),
            budgets: tuple[int, ...] = (2048, 4096, 8192, 16384), inflight: int | None = None) -> dict[str, Any]:
    model = MINILM.embedding
    texts, counts = mixed_chunks(docs)
    tokens = sum(counts)
    inflight = inflight or Settings().upstream.bulk_max_inflight
    default_budget = Settings().indexer.batch_tokens
    lengths = np.asarray(counts)
    print(f"batching: {len(texts)} mixed chunks ({tokens:,} tokens; p10/p50/p90 "
          f"{np.percentile(lengths, 10):.0f}/{np.percentile(lengths, 50):.0f}/{np.percentile(lengths, 90):.0f}), "
          f"{inflight} in flight, {rounds} rounds", flush=True)
    strategies = {f"{n} chunks": by_count(counts, n) for n in counts_grid}
    strategies |= {f"{b} tokens": by_tokens(counts, b) for b in budgets}
    asyncio.run(send(url, texts, by_count(counts, 16)[:2], 1, model))  # warm-up
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in strategies}
    order = list(strategies)
    for r in range(rounds):
        random.Random(r).shuffle(order)
        for name in order:
            groups = strategies[name]
            wall, ms = asyncio.run(send(url, texts, groups, inflight, model))
            runs[name].append({"wall_s": wall, "request_ms": ms})
    rows = []
    for name, groups in strategies.items():
        best = min(runs[name], key=lambda x: x["wall_s"])
        request_tokens = [sum(counts[g.start:g.stop]) for g in groups]
        ms = np.asarray(best["request_ms"])
        rows.append({"strategy": name, "kind": "tokens" if name.endswith("tokens") else "count",
                     "requests": len(groups), "tokens_per_s": tokens / best["wall_s"],
                     "tokens_per_s_rounds": [tokens / x["wall_s"] for x in runs[name]],
                     "max_request_tokens": max(request_tokens), "request_tokens_cv":
                     float(np.std(request_tokens) / np.mean(request_tokens)),
                     "request_ms_p50": float(np.percentile(ms, 50)), "request_ms_max": float(ms.max()),
                     "default": name == f"{default_budget} tokens"})
    best_row = max(rows, key=lambda x: x["tokens_per_s"])
    default_row = next((x for x in rows if x["default"]), None)
    return {"scenario": "batching", "model": model.name, "docs": docs, "chunks": len(texts), "tokens": tokens,
            "inflight": inflight, "rounds": rounds, "indexer_batch_tokens": default_budget,
            "chunk_tokens_percentiles": {str(q): float(np.percentile(lengths, q)) for q in (10, 50, 90, 100)},
            "rows": rows, "best": best_row["strategy"],
            "default_over_best": default_row["tokens_per_s"] / best_row["tokens_per_s"] if default_row else None}


COLUMNS = [("strategy", "strategy", ""), ("requests", "requests", "d"), ("tokens_per_s", "tokens/s", ",.0f"),
           ("max_request_tokens", "max tokens/request", ",d"), ("request_tokens_cv", "tokens/request cv", ".2f"),
           ("request_ms_p50", "request p50 ms", ",.0f"), ("request_ms_max", "request max ms", ",.0f")]


def report(result: dict[str, Any]) -> str:
    p = result["chunk_tokens_percentiles"]
    lines = [f"batching, {result['model']}: {result['chunks']} mixed chunks ({result['tokens']:,} tokens, "
             f"p10 {p['10']:.0f} / p50 {p['50']:.0f} / p90 {p['90']:.0f} tokens), {result['inflight']} requests in "
             f"flight, best of {result['rounds']} rounds", table(result["rows"], COLUMNS),
             f"best: {result['best']}; the indexer's default ({result['indexer_batch_tokens']} tokens) reaches "
             f"{result['default_over_best']:.3f} of it" if result["default_over_best"] else ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    rows = result["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = ["tab:blue" if r["kind"] == "tokens" else "tab:gray" for r in rows]
    names = [r["strategy"] + (" *" if r["default"] else "") for r in rows]
    axes[0].bar(names, [r["tokens_per_s"] for r in rows], color=colours)
    axes[0].set_ylabel("tokens/s (best round)")
    axes[0].set_title("throughput (blue: token budget, grey: fixed count; * indexer default)")
    axes[1].bar(names, [r["request_ms_max"] for r in rows], color=colours)
    axes[1].set_ylabel("slowest request, ms")
    axes[1].set_title("the slowest bulk request (what a search may wait behind)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=45)
    fig.suptitle(f"Batching toward /v1/embeddings, {result['model']}, {result['chunks']} mixed-length chunks")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
