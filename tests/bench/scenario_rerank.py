"""Rerank throughput: documents/s through ragserve's ``POST /v1/rerank`` and through the reranker runner's own
``/rerank`` with the body ragserve forwards, 32 and 100 candidates, short and long documents, alternating
request by request so both paths see the same machine; every request has a query and documents of its own
(the runner's prefix cache would serve a repeated body), so the two paths get different but like samples.

Short documents are SciFact titles (about 15 words); long ones SciFact abstracts cut to ``long_tokens`` (512, a
usual chunk size) of the runner's tokenizer (the tiny test tokenizer spends a token on every few letters, so
most abstracts are cut); *over the window*: two abstracts joined (1,000-3,400 tokens), which ragserve cuts to
the window less its prompt (``max_tokens_per_doc``; the runner's path gets the same cut in its body, computed
before the clock starts: a stricter reference). Over-window documents run at ``window_candidates`` (8) only: on
2 CPU cores 32 of them are 65k tokens, half a minute a request. Queries are SciFact's test claims. A request
that fails is counted per path, not fatal; ragserve runs with a rerank deadline of ``rerank_timeout_s`` (120 s,
the default 30 s is shorter than 100 long candidates take on these cores).

Found on the way, and fixed in ``service/upstream/rerank.py``: a document longer than the window was refused by
``/v1/rerank`` (the runner's 400, answered as 422 ``upstream_rejected_input``), while ``/v1/search``'s rerank
stage sent ``truncate_prompt_tokens``, which a vLLM pooling runner applies to the end of the whole prompt: it
cut the document's tail *and* the template's closing ``<|im_end|>\n<|im_start|>assistant\n<think>...`` turn,
where the yes/no score is read. The API is ``ragserve serve`` (qwen3 profile, the tiny Qwen3 reranker runner)
in its own process (``tests/bench/bench_api_search.py: api_process``).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.profiles import QWEN3, QWEN3_RERANK_INSTRUCTION
from tests.bench.bench_api_search import KEY, api_process
from tests.bench.bench_indexing import SCIFACT
from tests.bench.results import pyplot, ratio, table


def scifact_texts(n: int) -> tuple[list[str], list[str], list[str]]:
    """(titles, abstracts, queries) of the first ``n`` documents and the test claims."""
    titles, abstracts = [], []
    with open(SCIFACT) as f:
        for line in f:
            doc = json.loads(line)
            titles.append(doc["title"])
            abstracts.append(doc["text"])
            if len(titles) == n:
                break
    queries = [json.loads(line)["text"] for line in (SCIFACT.parent / "queries.jsonl").read_text().splitlines()
               if line.strip()]
    return titles, abstracts, queries


def fit(runner: httpx.Client, model: str, texts: list[str], limit: int) -> tuple[list[str], int]:
    """``texts`` cut (at a word) to at most ``limit`` tokens of the runner's tokenizer, and how many were cut.
    ``/v1/rerank`` forwards documents as they are, and the runner refuses a prompt past its window (a 422 from
    ragserve): see the module docstring."""
    out, cut = [], 0
    for text in texts:
        for _ in range(8):
            n = runner.post("/tokenize", json={"model": model, "prompt": text}).json()["count"]
            if n <= limit:
                break
            text = text[: int(len(text) * limit / n * 0.95)].rsplit(" ", 1)[0]
        else:
            raise RuntimeError(f"could not cut a document to {limit} tokens")
        cut += text != texts[len(out)]
        out.append(text)
    return out, cut


def doc_budget(runner: httpx.Client, model: str, query: str, window: int) -> int:
    """The ``max_tokens_per_doc`` ragserve sends for ``query`` (``RerankClient.fit``), for the runner's path."""
    from service.upstream.rerank import CUT_MARGIN_TOKENS

    count = runner.post("/tokenize", json={
        "model": model, "add_special_tokens": True, "chat_template_kwargs": {"instruction": QWEN3_RERANK_INSTRUCTION},
        "messages": [{"role": "query", "content": query}, {"role": "document", "content": ""}]}).json()["count"]
    return int(window - count - CUT_MARGIN_TOKENS)


def measure(*, embed_url: str, rerank_url: str, max_model_len: int = 2048, requests: int = 2,
            candidates: tuple[int, ...] = (32, 100), window_candidates: int = 8, long_tokens: int = 512,
            rerank_timeout_s: float = 120.0) -> dict[str, Any]:
    titles, abstracts, queries = scifact_texts(max(candidates) * 2)
    model = QWEN3.reranker
    assert model is not None
    joined = [f"{x}\n\n{y}" for x, y in zip(abstracts[::2], abstracts[1::2], strict=False)]
    with httpx.Client(base_url=rerank_url, timeout=60) as runner:
        cut_abstracts, cut = fit(runner, model.name, abstracts, long_tokens)
        joined_tokens = [runner.post("/tokenize", json={"model": model.name, "prompt": t}).json()["count"]
                         for t in joined]
    kinds = [("short", titles, candidates), ("long", cut_abstracts, candidates),
             ("over window", joined, (window_candidates,) if window_candidates else ())]
    rows = []
    print(f"rerank: {requests} requests per configuration and path, after one warm-up request each", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-rerank-") as tmp, \
            api_process(Path(tmp) / "data", embed_url=embed_url, rerank_url=rerank_url,
                        max_model_len=max_model_len, log_path=Path(tmp) / "serve.log",
                        env_extra={"RAGSERVE_UPSTREAM__RERANK_TIMEOUT_S": str(rerank_timeout_s)}) as (url, _), \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as api, \
            httpx.Client(base_url=rerank_url, timeout=600) as runner:
        warm = {"query": queries[0], "documents": titles[:4]}
        api.post("/v1/rerank", json=warm).raise_for_status()
        runner.post("/rerank", json={**warm, "model": model.name}).raise_for_status()
        for kind, docs, counts in kinds:
            for n in counts:
                times: dict[str, list[float]] = {"ragserve": [], "runner": []}
                failures: dict[str, list[str]] = {"ragserve": [], "runner": []}
                tokens = []
                for i in range(2 * requests):
                    # Every request its own query and documents: the runner caches prompt prefixes, so a body
                    # sent twice would be served from the cache the first one left. Who goes first alternates.
                    path = ("ragserve", "runner")[(i + i // 2) % 2]
                    start = (i * n) % max(1, len(docs) - n)
                    query = queries[(i + 7 * n + len(kind)) % len(queries)]
                    body = {"query": query, "documents": docs[start:start + n], "top_n": n,
                            "return_documents": True}
                    client, route, extra = (api, "/v1/rerank", {}) if path == "ragserve" else (
                        runner, "/rerank", {"model": model.name, "chat_template_kwargs": {
                            "instruction": QWEN3_RERANK_INSTRUCTION}})
                    if path == "runner" and kind == "over window":
                        extra["max_tokens_per_doc"] = doc_budget(runner, model.name, query, max_model_len)
                    t = time.perf_counter()
                    r = client.post(route, json={**body, **extra})
                    elapsed = time.perf_counter() - t
                    if r.status_code != 200:  # kept, not fatal: ragserve's deadlines are part of what is measured
                        failures[path].append(f"{r.status_code} after {elapsed:.1f}s: {r.text[:200]}")
                        continue
                    times[path].append(elapsed)
                    answer = r.json()  # ragserve answers in Cohere's shape, the runner in Jina's
                    tokens.append(answer["meta"]["tokens"]["input_tokens"] if path == "ragserve"
                                  else answer["usage"]["prompt_tokens"])
                row: dict[str, Any] = {"docs": kind, "candidates": n,
                                       "prompt_tokens_per_request": float(np.mean(tokens)) if tokens else None,
                                       "failures": failures, "errors": sum(map(len, failures.values()))}
                for path, ts in times.items():
                    row[f"{path}_docs_per_s"] = n * len(ts) / sum(ts) if ts else None
                    row[f"{path}_ms_p50"] = float(np.percentile(np.asarray(ts) * 1000, 50)) if ts else None
                row["ratio"] = ratio(row["ragserve_docs_per_s"], row["runner_docs_per_s"])
                print(f"  {kind} x {n}: ragserve {row['ragserve_docs_per_s'] or 0:.0f} docs/s, runner "
                      f"{row['runner_docs_per_s'] or 0:.0f} docs/s, {row['errors']} failed", flush=True)
                rows.append(row)
    return {"scenario": "rerank", "model": model.name, "requests": requests, "rows": rows,
            "long_documents_cut": cut, "long_document_limit_tokens": long_tokens,
            "over_window_tokens": {"p50": float(np.percentile(joined_tokens, 50)), "max": max(joined_tokens),
                                   "over": sum(t > max_model_len for t in joined_tokens), "of": len(joined)},
            "window": max_model_len, "rerank_timeout_s": rerank_timeout_s}


COLUMNS = [("docs", "documents", ""), ("candidates", "candidates", "d"),
           ("prompt_tokens_per_request", "prompt tokens/request", ",.0f"),
           ("ragserve_docs_per_s", "ragserve docs/s", ",.1f"), ("runner_docs_per_s", "runner docs/s", ",.1f"),
           ("ragserve_ms_p50", "ragserve p50 ms", ",.0f"), ("runner_ms_p50", "runner p50 ms", ",.0f"),
           ("ratio", "ragserve / runner", ".3f"), ("errors", "failed", "d")]


def report(result: dict[str, Any]) -> str:
    return "\n".join([f"rerank throughput, {result['model']} (tiny random checkpoint), {result['requests']} "
                      "requests each, alternating ragserve / runner", table(result["rows"], COLUMNS),
                      f"long documents: {result.get('long_documents_cut', '?')} of them cut to "
                      f"{result.get('long_document_limit_tokens', '?')} tokens (a chunk); over the window: two "
                      f"abstracts joined, {result.get('over_window_tokens', {}).get('over', '?')} of "
                      f"{result.get('over_window_tokens', {}).get('of', '?')} past the "
                      f"{result.get('window', '?')}-token window, cut by ragserve (max_tokens_per_doc)"])


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["ragserve_docs_per_s"] or 0 for r in rows], width=0.4, label="ragserve /v1/rerank",
           color="tab:blue")
    ax.bar(x + 0.2, [r["runner_docs_per_s"] or 0 for r in rows], width=0.4, label="runner /rerank",
           color="tab:gray")
    for i, r in enumerate(rows):
        label = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
        ax.text(i, max(r["ragserve_docs_per_s"] or 0, r["runner_docs_per_s"] or 0), label, ha="center",
                va="bottom", fontsize=9)
    ax.set_xticks(x, [f"{r['docs']} x {r['candidates']}" for r in rows])
    ax.set_ylabel("documents/s")
    ax.set_title(f"Rerank throughput, {result['model']} (label: ragserve / runner)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
