"""BM25 encoders on a BEIR dataset's test split, sparse retrieval only, scored the way the product scores them.

    python -m tests.bench.bench_bm25 ../shared/data/scifact [--json bm25.json] [--seeds 10]

Needs qdrant-edge-py, bm25s and pytrec-eval; fastembed is optional (its row reports why it did not load).

Document vectors (saturated term frequencies) go into a real Qdrant Edge shard whose sparse field has
``Modifier.Idf``, so the engine computes IDF, as in the product; each query's top 100 come from the shard.
Rows: ragserve's ``Bm25Encoder`` and the engine's ``qdrant_edge.Bm25``, each with ``avg_len`` 256 and with the
corpus's real average length (counted in that encoder's own terms); fastembed's ``Qdrant/bm25`` when it loads
offline; bm25s (its own index and scorer) as the reference. Then the length-normalisation design for the
better encoder: ``avg_len`` estimated from the first batch written to an empty collection (documents shuffled),
and how far that estimate drifts from the final average as documents keep arriving. Metrics: pytrec_eval
through ``service/evaluation/metrics.py``.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import mean
from typing import Any

import qdrant_edge as qe

from service.evaluation.dataset import BeirDataset
from service.evaluation.metrics import evaluate
from service.sparse.bm25 import Bm25Encoder, SparseConfig

Sparse = tuple[list[int], list[float]]
Encoder = tuple[Callable[[str], Sparse], Callable[[str], Sparse]]  # (document, query)
FIRST_BATCHES = (16, 64, 256, 1024)
DRIFT_AT = (16, 64, 256, 1024, 2048, 4096)


def ragserve_encoder(avg_len: float) -> Encoder:
    enc = Bm25Encoder(SparseConfig(avg_len=avg_len))

    def doc(text: str) -> Sparse:
        v = enc.encode_document(text)
        return v.indices, v.values

    def query(text: str) -> Sparse:
        v = enc.encode_query(text)
        return v.indices, v.values

    return doc, query


def engine_encoder(avg_len: float, **config: Any) -> Encoder:
    model = qe.Bm25(qe.Bm25Config(avg_len=avg_len, language="english", **config))

    def doc(text: str) -> Sparse:
        v = model.embed_document(text)
        return v.indices, v.values

    def query(text: str) -> Sparse:
        v = model.embed_query(text)
        return v.indices, v.values

    return doc, query


ENCODERS: dict[str, Callable[[float], Encoder]] = {"ragserve": ragserve_encoder, "engine": engine_encoder}


def lengths(name: str, texts: list[str]) -> list[int]:
    """Each document's length in the encoder's own terms (after stop-words, as its length normalisation counts)."""
    if name == "ragserve":
        enc = Bm25Encoder(SparseConfig())
        return [len(enc.terms(t)) for t in texts]
    # The engine does not expose its tokens: with b=0 a weight is tf (k + 1) / (tf + k), inverted here.
    doc, _ = engine_encoder(256.0, k=1.2, b=0.0)
    return [sum(round(1.2 * w / (2.2 - w)) for w in doc(t)[1]) for t in texts]


def edge_run(doc_ids: list[str], docs: list[Sparse], queries: dict[str, Sparse]) -> dict[str, dict[str, float]]:
    """Top 100 per query from an Edge shard holding the document vectors (the engine applies IDF)."""
    config = qe.EdgeConfig(sparse_vectors={"bm25": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)})
    with tempfile.TemporaryDirectory() as tmp:
        shard = qe.EdgeShard.create(tmp, config)
        try:
            points = [qe.Point(i, {"bm25": qe.SparseVector(*v)}, {"doc_id": d})
                      for i, (d, v) in enumerate(zip(doc_ids, docs, strict=True))]
            for i in range(0, len(points), 512):
                shard.update(qe.UpdateOperation.upsert_points(points[i:i + 512]))
            run: dict[str, dict[str, float]] = {}
            for qid, v in queries.items():
                if not v[0]:
                    continue  # no term survives analysis: nothing to find, counts as zero
                hits = shard.query(qe.QueryRequest(query=qe.Query.Nearest(qe.SparseVector(*v), using="bm25"),
                                                   limit=100, with_payload=True))
                run[qid] = {h.payload["doc_id"]: h.score for h in hits}
            return run
        finally:
            shard.close()


class Bench:
    def __init__(self, root: Path) -> None:
        data = BeirDataset(root)
        corpus = list(data.corpus())
        self.doc_ids = [d["id"] for d in corpus]
        self.texts = [d["text"] for d in corpus]
        self.queries = data.queries("test")
        self.qrels = data.qrels("test")

    def score(self, encoder: Encoder) -> dict[str, float]:
        doc, query = encoder
        return self.score_vectors([doc(t) for t in self.texts], {q: query(t) for q, t in self.queries.items()})

    def score_vectors(self, docs: list[Sparse], queries: dict[str, Sparse]) -> dict[str, float]:
        metrics = evaluate(self.qrels, edge_run(self.doc_ids, docs, queries))
        return {"ndcg@10": metrics["ndcg@10"], "recall@100": metrics["recall@100"]}

    def docs_per_s(self, encoder: Encoder, repeats: int = 3) -> float:
        """Documents encoded per second, one thread, the best of ``repeats`` passes over the corpus."""
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            for t in self.texts:
                encoder[0](t)
            best = min(best, time.perf_counter() - started)
        return len(self.texts) / best

    def fastembed(self) -> dict[str, dict[str, Any]]:
        """``Qdrant/bm25`` as published (its stop-word files come from a model hub), and fastembed's same BM25
        code given the NLTK stop-word list inline, which needs no download (a stand-in, labelled as such)."""
        from service.sparse.stopwords import STOPWORDS

        def vectors(model: Any) -> tuple[list[Sparse], dict[str, Sparse]]:
            docs = [(e.indices.tolist(), e.values.tolist()) for e in model.embed(self.texts)]
            found = model.query_embed(list(self.queries.values()))
            return docs, {q: (e.indices.tolist(), e.values.tolist()) for q, e in zip(self.queries, found, strict=True)}

        try:
            from fastembed import SparseTextEmbedding
            from fastembed.sparse.bm25 import Bm25
        except ImportError as exc:
            return {"fastembed Qdrant/bm25": {"error": f"{type(exc).__name__}: {exc}"}}
        out: dict[str, dict[str, Any]] = {}
        try:
            out["fastembed Qdrant/bm25"] = self.score_vectors(*vectors(
                SparseTextEmbedding("Qdrant/bm25", local_files_only=True)))
        except Exception as exc:  # the report is the error itself
            out["fastembed Qdrant/bm25"] = {"error": f"{type(exc).__name__}: {exc}"}
        with tempfile.TemporaryDirectory() as empty:
            model = Bm25("Qdrant/bm25", specific_model_path=empty, stopwords=set(STOPWORDS))
            out["fastembed Bm25 code, NLTK stop-words inline, avg_len 256 (stand-in)"] = self.score_vectors(
                *vectors(model))
        return out

    def bm25s(self) -> dict[str, float]:
        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(self.texts, stopwords="en", stemmer=stemmer, show_progress=False),
                        show_progress=False)
        qids = list(self.queries)
        tokens = bm25s.tokenize([self.queries[q] for q in qids], stopwords="en", stemmer=stemmer, show_progress=False)
        found, scores = retriever.retrieve(tokens, k=100, show_progress=False)
        run = {q: {self.doc_ids[d]: float(s) for d, s in zip(found[i], scores[i], strict=True)}
               for i, q in enumerate(qids)}
        metrics = evaluate(self.qrels, run)
        return {"ndcg@10": metrics["ndcg@10"], "recall@100": metrics["recall@100"]}

    def first_batch(self, name: str, doc_lengths: list[int], seeds: int) -> dict[str, Any]:
        """avg_len estimated from the first N documents of a shuffled stream, then kept; and its drift."""
        final = mean(doc_lengths)
        cache: dict[float, float] = {}

        def ndcg(avg_len: float) -> float:
            if avg_len not in cache:
                cache[avg_len] = self.score(ENCODERS[name](avg_len))["ndcg@10"]
            return cache[avg_len]

        out: dict[str, Any] = {"final_avg": final, "fixed_256": ndcg(256.0), "exact": ndcg(final), "batches": {}}
        streams = [random.Random(seed).sample(doc_lengths, len(doc_lengths)) for seed in range(seeds)]
        for n in FIRST_BATCHES:
            estimates = [mean(s[:n]) for s in streams]
            scores = [ndcg(e) for e in estimates]
            # Drift: the running average after m documents, relative to the kept first-batch estimate.
            drift = {m: max(abs(mean(s[:m]) / e - 1) for s, e in zip(streams, estimates, strict=True))
                     for m in (*DRIFT_AT, len(doc_lengths)) if m > n}
            out["batches"][n] = {"estimates": estimates, "ndcg_mean": mean(scores), "ndcg_min": min(scores),
                                 "max_drift": drift}
        out["sensitivity"] = {f: ndcg(final * f) for f in (0.5, 0.67, 0.8, 0.9, 1.1, 1.25, 1.5, 2.0)}
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--seeds", type=int, default=10, help="shuffles of the document stream")
    args = parser.parse_args()
    bench = Bench(args.dataset)
    print(f"{len(bench.texts)} documents, {len(bench.queries)} test queries")

    rows: dict[str, dict[str, Any]] = {}
    speed: dict[str, float] = {}
    avg: dict[str, float] = {}
    doc_lengths: dict[str, list[int]] = {}
    for name, make in ENCODERS.items():
        doc_lengths[name] = lengths(name, bench.texts)
        avg[name] = mean(doc_lengths[name])
        speed[name] = bench.docs_per_s(make(256.0))
        rows[f"{name}, avg_len 256"] = bench.score(make(256.0))
        rows[f"{name}, avg_len {avg[name]:.1f} (real)"] = bench.score(make(avg[name]))
    rows.update(bench.fastembed())
    rows["bm25s (reference)"] = bench.bm25s()

    print("\n| encoder | nDCG@10 | Recall@100 |\n|---|---:|---:|")
    for row, m in rows.items():
        if "error" in m:
            print(f"| {row} | did not load: `{m['error']}` | |")
        else:
            print(f"| {row} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} |")
    print("\nencode speed (documents/s, one thread, best of 3 passes): " + ", ".join(f"{n} {s:,.0f}" for n, s in speed.items()))

    best = max(ENCODERS, key=lambda n: rows[f"{n}, avg_len {avg[n]:.1f} (real)"]["ndcg@10"])
    design = bench.first_batch(best, doc_lengths[best], args.seeds)
    print(f"\navg_len from the first batch ({best} encoder, {args.seeds} shuffles; final average "
          f"{design['final_avg']:.1f}; fixed 256: {design['fixed_256']:.4f}; exact: {design['exact']:.4f})")
    print("\n| first batch | estimate / final | nDCG@10 mean | min | worst drift of the running average from the estimate |")
    print("|---:|---|---:|---:|---|")
    for n, b in design["batches"].items():
        drift = ", ".join(f"{m}: {d:.1%}" for m, d in b["max_drift"].items())
        est = f"{min(b['estimates']) / design['final_avg']:.2f}-{max(b['estimates']) / design['final_avg']:.2f}"
        print(f"| {n} | {est} | {b['ndcg_mean']:.4f} | {b['ndcg_min']:.4f} | after {drift} |")
    print("\nnDCG@10 with avg_len = factor x the real average: "
          + ", ".join(f"{f}x {v:.4f}" for f, v in design["sensitivity"].items()))

    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "avg_len": avg, "docs_per_s": speed, "design_encoder": best,
                                         "first_batch": design}, indent=2))


if __name__ == "__main__":
    main()
