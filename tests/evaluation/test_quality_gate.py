"""The retrieval-quality gate: ragserve's nDCG@10 on a SciFact slice equals references computed outside it.

The fast twin of ``test_scifact.py`` (the whole corpus, 7-15 minutes: the soak tier). It indexes the slice
``quality_slice.py`` built (24 test queries, their relevant abstracts and their full-corpus dense and BM25
top 10: 393 abstracts) through the running service the way users do (``ragserve index`` → ingest job →
worker), runs every query through ``POST /v1/search`` (``ragserve eval``'s code), and asserts dense, BM25
and hybrid nDCG@10 within +/-0.005 of the committed references (``quality/references.json``: each the range
over the orders of tied scores, a single point on this slice), in the mean
and for every query (a swap of the fusion weights moved the mean by 0.0045 only, 7 queries by up to 0.37), which
``quality_reference.py`` computes with no ragserve code: MiniLM through transformers, BM25 and RRF written
out from their definitions, nDCG by pytrec_eval.

The collection is created with the slice's true average length as ``avg_len``: the reference's BM25 uses
it, and the estimate ragserve makes without it (from the first written batch) depends on which batch the
worker writes first, which would make the figure depend on scheduling. The estimate has its own tests
(tests/service/sparse).

The minilm profile sends queries as they are, so a second, smaller part runs the qwen3 profile on the
session's tiny random-weight Qwen3 embedder: there a query reaches the model as ``Instruct: {task}\\nQuery:
{query}``, and each query's dense top 10 must be, id for id, the top 10 of a transformers reference that
formats queries the same way and pools the last token. Its reference is computed here, from the checkpoint
the session built (``tests/support/tiny_qwen3.py`` builds it deterministically from seed 0), not committed:
random weights are only as stable as the torch that drew them. Random weights rank at random, so the
ids, not the figure, carry that claim: a query formatted any other way ranks differently.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from service.client import AsyncClient
from service.config import Settings
from service.evaluation.dataset import BeirDataset
from service.evaluation.metrics import evaluate
from service.evaluation.run import run_queries
from tests.evaluation import quality_reference as ref
from tests.evaluation.quality_slice import OUT, SCIFACT, content_hash
from tests.support.app import API_KEY
from tests.support.server import live_server

pytestmark = pytest.mark.timeout(900)  # past its own indexing bound (900 s), so that one reports first

TOLERANCE = 0.005
MODES = ("dense", "sparse", "hybrid")
QWEN3_TASK = "Given a web search query, retrieve relevant passages that answer the query"
"""Qwen3-Embedding's default retrieval instruction (its model card), which the qwen3 profile sends."""


def load(name: str) -> dict[str, Any]:
    return json.loads((OUT / name).read_text())  # type: ignore[no-any-return]


def write_beir(folder: Path, doc_ids: set[str], queries: list[str], *, title_only: bool = False) -> BeirDataset:
    """The slice as a BEIR folder: the corpus rows as they are in SciFact (or their titles alone), the
    queries, and their test qrels."""
    (folder / "qrels").mkdir(parents=True)
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as src, \
            open(folder / "corpus.jsonl", "w", encoding="utf-8") as out:
        for line in src:
            row = json.loads(line) if line.strip() else None
            if row is not None and str(row["_id"]) in doc_ids:
                out.write(json.dumps({"_id": row["_id"], "text": row["title"]}) + "\n" if title_only else line)
    wanted = set(queries)
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as src, \
            open(folder / "queries.jsonl", "w", encoding="utf-8") as out:
        out.writelines(line for line in src if line.strip() and str(json.loads(line)["_id"]) in wanted)
    qrels = ref.read_qrels(SCIFACT)
    with open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        out.writelines(f"{q}\t{d}\t{s}\n" for q in queries for d, s in qrels[q].items() if d in doc_ids)
    return BeirDataset(folder)


async def index(url: str, corpus: Path, collection: str, expected: int) -> None:
    indexed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "service.cli", "index", str(corpus), "--collection", collection, "--url", url,
         "--quiet"],
        env={**os.environ, "RAGSERVE_API_KEY": API_KEY}, text=True, capture_output=True, timeout=900,
    )
    assert indexed.returncode == 0, indexed.stdout + indexed.stderr
    assert f"{expected} seen, {expected} indexed" in indexed.stdout, indexed.stdout


async def test_minilm_dense_sparse_hybrid_match_the_references(minilm_settings: Settings, tmp_path: Path) -> None:
    slice_, refs = load("slice.json"), load("references.json")
    docs, all_queries = ref.read_corpus(SCIFACT, slice_["documents"]), ref.read_queries(SCIFACT)
    assert content_hash(docs, {q: all_queries[q] for q in slice_["queries"]}) == slice_["sha256"], (
        "SciFact changed under the references: rebuild them with `python -m tests.evaluation.quality_slice`")
    dataset = write_beir(tmp_path / "slice", set(slice_["documents"]), slice_["queries"])

    minilm_settings.indexer.poll_s = 0.05
    with live_server(minilm_settings, with_worker=True) as url:
        async with AsyncClient(url, API_KEY) as client:
            await client.create_collection("quality", sparse={"avg_len": refs["bm25"]["avg_len"]})
            await index(url, dataset.root / "corpus.jsonl", "quality", len(docs))
            queries = dataset.queries("test")
            runs = {mode: (await run_queries(client, queries, "quality", top_k=100, mode=mode))[0] for mode in MODES}
    qrels = dataset.qrels("test")
    measured = {mode: round(evaluate(qrels, run)["ndcg@10"], 4) for mode, run in runs.items()}  # as `ragserve eval`
    print(f"\nquality gate, nDCG@10 on {len(docs)} abstracts x {len(queries)} queries: ragserve {measured}, "
          f"references {refs['ndcg@10']}")
    # Each reference is a range, [lowest, highest] over the orders of tied scores (``ref.tie_extremes``):
    # the engine orders equal scores by internal offsets, which follow the order the worker's concurrent
    # batches were written, so a tie's order is chance, not ragserve's. On this slice every range is a single
    # point (no tie, within float32's precision, puts a relevant abstract on either side of a top-10 cut or
    # moves it across the prefetch cut), so the check is as strict as +/-0.005 of the exact figure; a rebuild
    # that finds ties widens the range instead of making the gate fail by chance.
    span = refs["ndcg@10_tie_range"]
    off = {m: (measured[m], span[m]) for m in MODES
           if not span[m][0] - TOLERANCE <= measured[m] <= span[m][1] + TOLERANCE}
    assert not off, f"nDCG@10 (ragserve, reference range) off by more than {TOLERANCE}: {off}"
    # Per query too: a change that helps some queries and hurts others can leave the mean in tolerance
    # (dense:sparse weights swapped moved the hybrid mean by 0.0045 while 7 of 24 queries moved by 0.07-0.37,
    # both ways).
    for mode, run in runs.items():
        per_query = ref.ndcg_at_10_per_query(qrels, {q: list(scores.items()) for q, scores in run.items()})
        expected = refs["ndcg@10_tie_range_per_query"][mode]
        off = {q: (round(v, 4), expected[q]) for q, v in per_query.items()
               if not expected[q][0] - TOLERANCE <= v <= expected[q][1] + TOLERANCE}
        assert not off, f"{mode}: nDCG@10 (ragserve, reference range) of {len(off)} queries off: {off}"


async def test_qwen3_queries_reach_the_model_with_their_instruction(
    qwen3_settings: Settings, tiny_qwen3: Path, tmp_path: Path,
) -> None:
    slice_ = load("slice.json")
    doc_ids, query_ids = slice_["qwen3_documents"], slice_["qwen3_queries"]
    dataset = write_beir(tmp_path / "titles", set(doc_ids), query_ids, title_only=True)
    titles = {d["id"]: d["text"] for d in dataset.corpus()}
    queries = dataset.queries("test")

    ids = sorted(titles)
    vectors = await asyncio.to_thread(ref.last_token_pooled, tiny_qwen3,
                                      [titles[d] for d in ids] + [ref.qwen3_query(QWEN3_TASK, queries[q])
                                                                  for q in query_ids])
    docs, query_vectors = vectors[: len(ids)], dict(zip(query_ids, vectors[len(ids):], strict=True))
    expected = {q: ref.cosine_top(ids, docs, query_vectors[q], 10) for q in query_ids}

    qwen3_settings.indexer.poll_s = 0.05
    qwen3_settings.indexer.tokenizer_path = str(tiny_qwen3)  # the chunker counts with the served tokenizer
    with live_server(qwen3_settings, with_worker=True) as url:
        await index(url, dataset.root / "corpus.jsonl", "titles", len(ids))
        async with AsyncClient(url, API_KEY) as client:
            run, _ = await run_queries(client, queries, "titles", top_k=10, mode="dense")
    measured = {q: [d for d, _ in sorted(run[q].items(), key=lambda kv: -kv[1])] for q in query_ids}
    differ = [q for q in query_ids if measured[q] != [d for d, _ in expected[q]]]
    qrels = dataset.qrels("test")
    print(f"\nquality gate, qwen3 (tiny) titles: nDCG@10 ragserve "
          f"{ref.ndcg_at_10(qrels, {q: list(run[q].items()) for q in query_ids}):.4f}, "
          f"reference {ref.ndcg_at_10(qrels, expected):.4f}")
    assert not differ, (f"dense top 10 differs from the reference's for {len(differ)} of {len(query_ids)} "
                        f"queries; query {differ[0]}: ragserve {measured[differ[0]]}, "
                        f"reference {[d for d, _ in expected[differ[0]]]}")
