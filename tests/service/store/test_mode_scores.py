"""``VectorStore.mode_scores`` on every backend (Edge, Edge behind its process boundary, the server code on
qdrant-client's local mode): a fused hit's dense and BM25 scores are exactly the scores a dense-only and a
sparse-only query give the same point, checked against those queries and against the contract's independent
oracles (numpy cosine, the BM25/IDF formula); a hit with no term in common with the query has no BM25 score."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.store.base import VectorStore
from service.store.types import Filter, Fusion, Match, SparseVector
from tests.service.store.test_contract import (
    DOCS,
    QUERY,
    TERMS,
    TOL,
    N,
    bm25_oracle,
    cosine_oracle,
    open_backend,
    seed,
)

Q = SparseVector([2, 5, 9], [1.0, 1.0, 1.0])
NO_TERM = [DOCS[i]["doc_id"] for i in range(N) if not set(TERMS[i]) & set(Q.indices)]


@pytest.fixture(params=["edge", "edge-process", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStore]:
    s = await open_backend(request.param, tmp_path)
    await seed(s)
    yield s
    await s.aclose()


@pytest.mark.parametrize("method", ["rrf", "dbsf"])
async def test_a_fused_hit_scores_as_the_dense_and_the_sparse_query_score_it(store: VectorStore, method: str) -> None:
    fused = await store.query("c", dense=QUERY.tolist(), sparse=Q, limit=12,
                              fusion=Fusion(method, prefetch_limit=10))
    scores = await store.mode_scores("c", [h.id for h in fused], dense=QUERY.tolist(), sparse=Q)
    dense_only = {h.id: h.score for h in await store.query("c", dense=QUERY.tolist(), limit=N)}
    sparse_only = {h.id: h.score for h in await store.query("c", sparse=Q, limit=N)}

    assert list(scores) == [h.id for h in fused]
    by_doc = {h.doc_id: scores[h.id] for h in fused}
    # The fused top 12 of two 10-deep lists holds points only one of them found: some share no term with Q.
    unmatched = sorted(d for d, s in by_doc.items() if s.bm25 is None)
    assert unmatched and unmatched == sorted(set(by_doc) & set(NO_TERM))
    for h in fused:
        assert scores[h.id].dense == pytest.approx(dense_only[h.id], abs=TOL)
        assert scores[h.id].bm25 == (None if h.doc_id in NO_TERM else pytest.approx(sparse_only[h.id], abs=TOL))
    cosine = dict(cosine_oracle(list(range(N)), N))
    bm25 = bm25_oracle(list(range(N)), Q.indices)
    assert {d: s.dense for d, s in by_doc.items()} == pytest.approx({d: cosine[d] for d in by_doc}, abs=TOL)
    assert {d: s.bm25 for d, s in by_doc.items() if s.bm25 is not None} == \
        pytest.approx({d: bm25[d] for d in by_doc if d not in NO_TERM}, abs=TOL)


async def test_bm25_counts_over_the_fused_querys_corpus(store: VectorStore) -> None:
    """A tenant's search counts document frequencies over its own points: the scores reported for its hits
    are those of its own sparse-only search, not the whole collection's."""
    corpus = Filter(must=(Match("metadata.lang", "de"),))
    rows = [i for i in range(N) if DOCS[i]["meta"]["lang"] == "de"]
    fused = await store.query("c", dense=QUERY.tolist(), sparse=Q, limit=8, query_filter=corpus,
                              idf_corpus=corpus, fusion=Fusion(prefetch_limit=8))
    scores = await store.mode_scores("c", [h.id for h in fused], dense=QUERY.tolist(), sparse=Q, idf_corpus=corpus)
    own = {h.id: h.score for h in await store.query("c", sparse=Q, limit=N, query_filter=corpus,
                                                      idf_corpus=corpus)}
    matched = {h.id: h.doc_id for h in fused if scores[h.id].bm25 is not None}
    assert matched and {i: scores[i].bm25 for i in matched} == pytest.approx({i: own[i] for i in matched}, abs=TOL)
    tenant_idf = bm25_oracle(rows, Q.indices)
    collection_idf = bm25_oracle(list(range(N)), Q.indices)
    for i, doc_id in matched.items():
        assert scores[i].bm25 == pytest.approx(tenant_idf[doc_id], abs=TOL)
        assert scores[i].bm25 != pytest.approx(collection_idf[doc_id], abs=TOL)


async def test_no_ids_no_scores(store: VectorStore) -> None:
    assert await store.mode_scores("c", [], dense=QUERY.tolist(), sparse=Q) == {}
