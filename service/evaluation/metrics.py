"""IR metrics through ``pytrec_eval`` (trec_eval's own C code, as BEIR and MTEB use), not hand-written."""

from __future__ import annotations

from statistics import mean

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]

MEASURES = {
    "ndcg@10": "ndcg_cut_10",
    "recall@10": "recall_10",
    "recall@100": "recall_100",
    "mrr@10": "recip_rank",
}


def _cut(run: Run, k: int) -> Run:
    return {q: dict(sorted(docs.items(), key=lambda kv: kv[1], reverse=True)[:k]) for q, docs in run.items()}


def evaluate(qrels: Qrels, run: Run) -> dict[str, float]:
    """Mean nDCG@10, Recall@10, Recall@100 and MRR@10 over the queries in ``qrels``.

    Queries of ``qrels`` missing from ``run`` count as zero, as in BEIR. MRR@10 is trec_eval's reciprocal
    rank on the run cut to 10 documents per query.
    """
    import pytrec_eval

    full = {q: run.get(q, {}) for q in qrels}
    measures = {"ndcg_cut.10", "recall.10,100"}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(full)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(_cut(full, 10))
    out = {}
    for name, key in MEASURES.items():
        source = rr if key == "recip_rank" else per_query
        out[name] = mean(source.get(q, {}).get(key, 0.0) for q in qrels)
    return out
