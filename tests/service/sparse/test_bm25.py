from __future__ import annotations

import pytest

from service.sparse.bm25 import Bm25Encoder, SparseConfig

LEGACY = SparseConfig(encoder="ragserve", avg_len=256)


def term(enc: Bm25Encoder, word: str) -> int:
    (index,) = enc.encode_query(word).indices
    return index


def test_engine_analysis_counts_stemmed_terms_without_stopwords() -> None:
    enc = Bm25Encoder(SparseConfig())
    tf = enc.frequencies("The genes, GENE and gene: protein of the proteins")
    assert tf == {term(enc, "gene"): 3, term(enc, "protein"): 2}
    assert enc.encode_query("the of and").indices == []


def test_engine_analysis_is_configurable() -> None:
    plain = Bm25Encoder(SparseConfig(stemming=False, stopwords=False))
    tf = plain.frequencies("The genes gene the")
    assert tf == {term(plain, "the"): 2, term(plain, "genes"): 1, term(plain, "gene"): 1}


@pytest.mark.parametrize("config", [SparseConfig(), LEGACY], ids=["engine", "legacy"])
def test_document_weights_are_bm25_term_frequency_saturation(config: SparseConfig) -> None:
    enc = Bm25Encoder(config.model_copy(update={"k1": 1.2, "b": 0.75}))
    vec = enc.encode_document("gene gene protein cell", avg_len=4)  # 4 terms = avg_len: the length norm is k1
    weights = dict(zip(vec.indices, vec.values, strict=True))
    assert weights[term(enc, "gene")] == pytest.approx(2 * 2.2 / (2 + 1.2))
    assert weights[term(enc, "cell")] == pytest.approx(1 * 2.2 / (1 + 1.2))
    longer = dict(zip(*(lambda v: (v.indices, v.values))(enc.encode_document("gene gene protein cell", avg_len=2)),
                      strict=True))
    assert longer[term(enc, "cell")] == pytest.approx(2.2 / (1 + 1.2 * (0.25 + 0.75 * 2)))


def test_query_has_unit_weight_per_distinct_term() -> None:
    for config in (SparseConfig(), LEGACY):
        q = Bm25Encoder(config).encode_query("gene genes GENE protein")
        assert len(q.indices) == 2 and q.values == [1.0, 1.0] and q.indices == sorted(q.indices)


def test_legacy_analysis_lowercases_drops_stopwords_and_stems() -> None:
    enc = Bm25Encoder(LEGACY)
    assert enc.terms("The BRCA1 genes aren't MUTATING in patients") == ["brca1", "gene", "mutat", "patient"]
    assert Bm25Encoder(LEGACY.model_copy(update={"lowercase": False, "stemming": False, "stopwords": False})).terms(
        "The Genes") == ["The", "Genes"]


def test_an_unknown_avg_len_is_never_guessed() -> None:
    with pytest.raises(ValueError, match="avg_len"):
        Bm25Encoder(SparseConfig()).encode_document("gene")
