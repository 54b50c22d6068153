"""Our metric wrapper (pytrec_eval underneath) against values worked out by hand on a tiny run."""

from __future__ import annotations

import math

import pytest

from service.evaluation.metrics import evaluate

QRELS = {"q1": {"d1": 1, "d3": 1}, "q2": {"d9": 1}, "q3": {"d5": 2}}
RUN = {
    "q1": {"d1": 0.9, "d2": 0.8, "d3": 0.7},              # hits at ranks 1 and 3
    "q2": {f"x{i}": 1.0 - i / 100 for i in range(10)} | {"d9": 0.001},  # relevant at rank 11
    # q3 missing from the run: counts as zero
}


def test_against_hand_computed_values() -> None:
    m = evaluate(QRELS, RUN)
    dcg_q1 = 1 / math.log2(2) + 1 / math.log2(4)
    idcg_q1 = 1 / math.log2(2) + 1 / math.log2(3)
    assert m["ndcg@10"] == pytest.approx((dcg_q1 / idcg_q1 + 0 + 0) / 3)
    assert m["recall@10"] == pytest.approx((1 + 0 + 0) / 3)
    assert m["recall@100"] == pytest.approx((1 + 1 + 0) / 3)
    assert m["mrr@10"] == pytest.approx((1 + 0 + 0) / 3)  # q2's hit at 11 is outside MRR@10


def test_graded_relevance() -> None:
    m = evaluate({"q": {"a": 2, "b": 1}}, {"q": {"b": 2.0, "a": 1.0}})
    dcg = 1 / math.log2(2) + 2 / math.log2(3)   # trec_eval uses gain = rel, not 2^rel - 1
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert m["ndcg@10"] == pytest.approx(dcg / idcg)
