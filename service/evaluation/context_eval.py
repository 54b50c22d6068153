"""``ragserve eval --context --budget N``: ``/v1/context`` beside plain packing of the same hits, on a BEIR-layout
dataset (``service.evaluation.copies`` makes one with near-duplicate versions of documents).

The collection is indexed, when empty, from the dataset's ``corpus.jsonl`` uploaded as one ingest job with token
chunking (``--chunk-tokens``, default 64, at the default overlap), the way a user indexes files. For each query,
plain packing is what an app does with ``/v1/search`` today: ``top_k`` 50, then chunk texts in rank order under
the same passage header, counted with the same tokenizer, until the next would pass the budget
(:func:`service.evaluation.context_metrics.plain_pack`); ``/v1/context`` is asked for the same budget with its
defaults. Both are scored by :func:`service.evaluation.context_metrics.context_report`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from service.client import AsyncClient
from service.evaluation.context_metrics import Packed, PackedPassage, context_report, plain_pack
from service.evaluation.copies import load_copies
from service.evaluation.dataset import BeirDataset

CORPUS = "corpus.jsonl"


async def ensure_chunked(client: AsyncClient, root: Path, collection: str, *, chunk_tokens: int,
                         timeout_s: float = 3600) -> None:
    if (await client.ensure_collection(collection)).points > 0:
        return
    job = await client.ingest_files(collection, [(CORPUS, (root / CORPUS).read_bytes())],
                                    options={"chunking": "tokens", "chunk_tokens": chunk_tokens},
                                    timeout_s=timeout_s)
    if job.state != "succeeded":
        raise RuntimeError(f"indexing {root / CORPUS} ended {job.state}: {job}")


async def evaluate_context(
    url: str, api_key: str, root: Path, collection: str, *, tokenizer_file: Path, split: str = "test",
    budget: int = 512, chunk_tokens: int = 64, concurrency: int = 4, options: dict[str, Any] | None = None,
    timeout_s: float = 300.0, min_relevant: int = 1,
) -> dict[str, dict[str, float]]:
    """Rows ``plain`` and ``context`` of :func:`context_report` over the split's queries that have at least
    ``min_relevant`` relevant documents (2 or more: the queries where packing several documents matters)."""
    dataset = BeirDataset(root)
    tok = Tokenizer.from_file(str(tokenizer_file))
    tok.no_padding()
    tok.no_truncation()

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    qrels = {q: docs for q, docs in dataset.qrels(split).items()
             if sum(1 for grade in docs.values() if grade > 0) >= min_relevant}
    queries = {q: text for q, text in dataset.queries(split).items() if q in qrels}
    copies = load_copies(root)
    plain: dict[str, Packed] = {}
    packed: dict[str, Packed] = {}
    slots = asyncio.Semaphore(concurrency)
    async with AsyncClient(url, api_key, timeout=timeout_s) as client:
        await ensure_chunked(client, root, collection, chunk_tokens=chunk_tokens)

        async def one(qid: str, text: str) -> None:
            async with slots:
                hits = (await client.search(collection, text, top_k=50)).hits
                result = await client.context(collection, text, budget_tokens=budget, **(options or {}))
            titles = {h.doc_id: str(h.metadata.get("title") or h.doc_id) for h in hits}
            plain[qid] = plain_pack([(h.doc_id, h.text) for h in hits], budget=budget, count=count,
                                    render=lambda n, doc, t: f"[{n}] {titles.get(doc, doc)}\n{t}")
            packed[qid] = Packed(
                passages=[PackedPassage(p.doc_id, p.text, p.tokens) for p in result.passages], tokens=result.tokens,
                dropped_duplicates=[d.doc_id for d in result.dropped if d.reason == "duplicate"])

        await asyncio.gather(*(one(q, t) for q, t in queries.items()))
    return {"plain": context_report(plain, qrels, copies, budget),
            "context": context_report(packed, qrels, copies, budget)}
