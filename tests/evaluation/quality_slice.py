"""Build the quality gate's SciFact slice and its references: ``python -m tests.evaluation.quality_slice``.

The gate (``test_quality_gate.py``) cannot index all 5,183 abstracts in CI (7-15 minutes on 2 cores), so it
indexes a slice that keeps the evaluation hard: a fixed sample of test queries, each query's relevant
abstracts, and its **hard negatives**, the abstracts that rank in its top ``DEPTH`` on the *full* corpus by
dense (all-MiniLM-L6-v2) or by BM25. With ``DEPTH`` = 10, the nDCG@10 cut-off, every abstract that reaches a
query's full-corpus top 10 by either method is in the slice, so each query's dense top 10 on the slice is
exactly its top 10 on the full corpus (BM25's moves a little: IDF and the average length are the slice's).
A deeper pool (the issue suggested the top 100) would not fit the time: 100 per method is ~150 abstracts a
query, and the runner embeds ~7 abstracts a second on 2 busy cores.

Everything is deterministic: the queries are a seeded sample of the test split, the pools are exact
(brute-force cosine, exact BM25, ties broken in corpus or id order). Written next to this file, in ``quality/``:

- ``slice.json``: the query ids, the document ids, and a SHA-256 of their texts (the gate refuses a dataset
  that changed under the references);
- ``references.json``: nDCG@10 of dense, BM25 and hybrid (RRF) on the slice, computed by
  ``quality_reference`` (no ragserve code), with the command and the settings they assume.

Embedding the full corpus once with torch takes ~9 CPU-minutes (19 min of wall time on 2 busy cores;
``--cache DIR`` keeps the matrix, and a rebuild from it takes ~20 s). A build from scratch and three from the
cache wrote byte-identical files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

import numpy as np

from tests.evaluation import quality_reference as ref

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scifact"
OUT = Path(__file__).resolve().parent / "quality"
QUERIES = 24
DEPTH = 10
SEED = 17
QWEN3_DEPTH = 3
"""The qwen3 part indexes titles only (the tiny runner embeds long inputs slowly): the relevant abstracts'
and each query's dense top 3 on the full corpus."""
COMMAND = "python -m tests.evaluation.quality_slice"

# The settings the references assume: BM25 as docs/bm25.md defines it, hybrid as docs/retrieval-quality.md
# chose it (RRF k=2, dense:sparse weights 1:1.5, 100 candidates from each list; top 100 returned).
K1, B = 1.2, 0.75
RRF_K, RRF_WEIGHTS, PREFETCH, TOP_K = 2, (1.0, 1.5), 100, 100


def content_hash(docs: dict[str, str], queries: dict[str, str]) -> str:
    """SHA-256 over the slice's texts in id order: the references hold for these texts only."""
    h = hashlib.sha256()
    for kind, items in (("doc", docs), ("query", queries)):
        for key in sorted(items):
            h.update(f"{kind}\x1f{key}\x1f{items[key]}\x1e".encode())
    return h.hexdigest()


def choose_queries(qrels: ref.Qrels, n: int, seed: int) -> list[str]:
    return sorted(random.Random(seed).sample(sorted(qrels, key=int), n), key=int)


def corpus_vectors(ids: list[str], texts: list[str], cache: Path | None) -> np.ndarray:
    if cache is not None:
        path = cache / "minilm_corpus.npy"
        ids_path = cache / "minilm_corpus_ids.json"
        if path.exists() and ids_path.exists() and json.loads(ids_path.read_text()) == ids:
            return np.load(path)
    vectors = ref.mean_pooled(ref.minilm_dir(), texts)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        np.save(cache / "minilm_corpus.npy", vectors)
        (cache / "minilm_corpus_ids.json").write_text(json.dumps(ids))
    return vectors


def slice_references(docs: dict[str, str], vectors: dict[str, np.ndarray], queries: dict[str, str],
                     query_vectors: dict[str, np.ndarray], qrels: ref.Qrels) -> dict[str, object]:
    """nDCG@10 of dense, BM25 and hybrid over the slice alone, as the gate's collection holds it."""
    ids = sorted(docs, key=int)
    matrix = np.stack([vectors[d] for d in ids])
    bm25 = ref.Bm25(docs, k1=K1, b=B)
    dense_runs, sparse_runs, hybrid_runs = {}, {}, {}
    for q, text in queries.items():
        dense = ref.cosine_top(ids, matrix, query_vectors[q], max(TOP_K, PREFETCH))
        sparse = bm25.search(text, max(TOP_K, PREFETCH))
        dense_runs[q], sparse_runs[q] = dense[:TOP_K], sparse[:TOP_K]
        hybrid_runs[q] = ref.rrf([dense[:PREFETCH], sparse[:PREFETCH]], RRF_WEIGHTS, RRF_K, TOP_K)
    runs = {"dense": dense_runs, "sparse": sparse_runs, "hybrid": hybrid_runs}
    per_query = {mode: ref.ndcg_at_10_per_query(qrels, run) for mode, run in runs.items()}
    ranges = tie_ranges(ids, matrix, bm25, queries, query_vectors, qrels)
    for mode, by_query in ranges.items():  # the exact reference is one of the tie orders
        for q, (low, high) in by_query.items():
            assert low - 1e-9 <= per_query[mode][q] <= high + 1e-9, (mode, q, low, per_query[mode][q], high)
    return {
        "ndcg@10": {mode: round(ref.ndcg_at_10(qrels, run), 4) for mode, run in runs.items()},
        "ndcg@10_per_query": {mode: {q: round(v, 4) for q, v in values.items()} for mode, values in per_query.items()},
        "ndcg@10_tie_range": {mode: [round(sum(lo for lo, _ in by_query.values()) / len(by_query), 4),
                                     round(sum(hi for _, hi in by_query.values()) / len(by_query), 4)]
                              for mode, by_query in ranges.items()},
        "ndcg@10_tie_range_per_query": {mode: {q: [round(lo, 4), round(hi, 4)] for q, (lo, hi) in by_query.items()}
                                        for mode, by_query in ranges.items()},
        "ties": "the ranges: nDCG@10 over the orders of tied scores (quality_reference.tie_extremes); the gate "
                "accepts any order, since the engine's is its internal offsets' and trec_eval re-sorts equal scores",
        "bm25": {"k1": K1, "b": B, "avg_len": bm25.avg_len,
                 "note": "avg_len: the slice's mean length in terms; the gate creates its collection with it"},
        "hybrid": {"fusion": "rrf", "k": RRF_K, "weights": list(RRF_WEIGHTS), "prefetch": PREFETCH, "top_k": TOP_K},
    }


def tie_ranges(ids: list[str], matrix: np.ndarray, bm25: ref.Bm25, queries: dict[str, str],
               query_vectors: dict[str, np.ndarray], qrels: ref.Qrels) -> dict[str, dict[str, tuple[float, float]]]:
    """Per mode and query, (lowest, highest) nDCG@10 over the orders of tied scores: dense and BM25 lists
    with their ties' relevant documents last, then first (each list whole, so a tie across the top-``TOP_K``
    or the prefetch cut counts); hybrid fuses the two worst (best) lists, then orders its own ties the same way."""
    ranges: dict[str, dict[str, tuple[float, float]]] = {"dense": {}, "sparse": {}, "hybrid": {}}
    whole = len(ids)
    for q, text in queries.items():
        rel = qrels.get(q, {})
        dense = ref.tie_extremes(ref.cosine_top(ids, matrix, query_vectors[q], whole), rel, ref.cosine_tied, whole)
        sparse = ref.tie_extremes(bm25.search(text, whole), rel, ref.bm25_tied, whole)
        hybrid = tuple(ref.tie_extremes(ref.rrf([dense[i][:PREFETCH], sparse[i][:PREFETCH]], RRF_WEIGHTS, RRF_K, whole),
                                        rel, ref.rrf_tied, whole)[i] for i in (0, 1))
        for mode, (best, worst) in (("dense", dense), ("sparse", sparse), ("hybrid", hybrid)):
            values = [ref.ndcg_at_10_per_query({q: rel}, {q: ref.as_ranked(run[:TOP_K])})[q] for run in (worst, best)]
            ranges[mode][q] = (values[0], values[1])
    return ranges


def build(root: Path, out: Path, *, n_queries: int, depth: int, seed: int, cache: Path | None) -> dict[str, object]:
    corpus = ref.read_corpus(root)
    all_queries = ref.read_queries(root)
    all_qrels = ref.read_qrels(root, "test")
    chosen = choose_queries(all_qrels, n_queries, seed)
    queries = {q: all_queries[q] for q in chosen}
    qrels = {q: all_qrels[q] for q in chosen}

    ids = list(corpus)
    matrix = corpus_vectors(ids, [corpus[d] for d in ids], cache)
    query_matrix = ref.mean_pooled(ref.minilm_dir(), [queries[q] for q in chosen])
    query_vectors = dict(zip(chosen, query_matrix, strict=True))
    full_bm25 = ref.Bm25(corpus, k1=K1, b=B)

    pool: set[str] = set()
    full_dense, full_sparse = {}, {}
    for q in chosen:
        full_dense[q] = ref.cosine_top(ids, matrix, query_vectors[q], TOP_K)
        full_sparse[q] = full_bm25.search(queries[q], TOP_K)
        pool |= set(qrels[q]) | {d for d, _ in full_dense[q][:depth]} | {d for d, _ in full_sparse[q][:depth]}
    doc_ids = [d for d in ids if d in pool]  # corpus order
    docs = {d: corpus[d] for d in doc_ids}
    vectors = {d: matrix[i] for i, d in enumerate(ids) if d in pool}

    qwen3_pool = {d for q in chosen for d in [*qrels[q], *(d for d, _ in full_dense[q][:QWEN3_DEPTH])]}
    slice_ = {
        "dataset": "SciFact (BEIR), test split", "queries": chosen, "documents": doc_ids, "depth": depth,
        "seed": seed, "sha256": content_hash(docs, queries),
        "qwen3_queries": chosen, "qwen3_documents": [d for d in ids if d in qwen3_pool],
    }
    references = {
        "command": COMMAND, "dataset": slice_["dataset"], "documents": len(doc_ids), "queries": len(chosen),
        **slice_references(docs, vectors, queries, query_vectors, qrels),
        "full_corpus_ndcg@10": {  # the same queries against all 5,183 abstracts, for context only
            "dense": round(ref.ndcg_at_10(qrels, full_dense), 4),
            "sparse": round(ref.ndcg_at_10(qrels, full_sparse), 4),
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "slice.json").write_text(json.dumps(slice_, indent=1) + "\n")
    (out / "references.json").write_text(json.dumps(references, indent=1) + "\n")
    return references


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SCIFACT, help="SciFact in the BEIR layout")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--queries", type=int, default=QUERIES)
    parser.add_argument("--depth", type=int, default=DEPTH)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--cache", type=Path, default=None, help="keep the full corpus' MiniLM vectors here")
    args = parser.parse_args()
    references = build(args.data, args.out, n_queries=args.queries, depth=args.depth, seed=args.seed,
                       cache=args.cache)
    print(json.dumps(references, indent=1))


if __name__ == "__main__":
    main()
