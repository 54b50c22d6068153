from __future__ import annotations

import pytest

from service.sparse.bm25 import Bm25Encoder, SparseConfig


def test_analysis_lowercases_drops_stopwords_and_stems() -> None:
    enc = Bm25Encoder(SparseConfig())
    assert enc.terms("The BRCA1 genes aren't MUTATING in patients") == ["brca1", "gene", "mutat", "patient"]


def test_analysis_is_configurable() -> None:
    enc = Bm25Encoder(SparseConfig(lowercase=False, stemming=False, stopwords=False))
    assert enc.terms("The Genes") == ["The", "Genes"]


def test_document_weights_are_bm25_term_frequency_saturation() -> None:
    cfg = SparseConfig(k1=1.2, b=0.75, avg_len=4)
    enc = Bm25Encoder(cfg)
    vec = enc.encode_document("gene gene protein cell")  # 4 terms = avg_len, so the length norm is k1
    weights = dict(zip(vec.indices, vec.values, strict=True))
    (gene,) = enc.encode_query("gene").indices
    (cell,) = enc.encode_query("cell").indices
    assert weights[gene] == pytest.approx(2 * 2.2 / (2 + 1.2))
    assert weights[cell] == pytest.approx(1 * 2.2 / (1 + 1.2))


def test_query_has_unit_weight_per_distinct_term() -> None:
    q = Bm25Encoder(SparseConfig()).encode_query("gene genes GENE protein")
    assert len(q.indices) == 2 and q.values == [1.0, 1.0]


def test_stopword_only_query_is_empty() -> None:
    assert Bm25Encoder(SparseConfig()).encode_query("the of and").indices == []
