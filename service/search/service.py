"""The search pipeline: embed the query (or take its vector from the query-embedding cache), vector-search Qdrant,
rerank the candidates.

Each stage is timed and reported; stage latencies also feed the Prometheus histograms (``embed`` only when the
runner embedded the query: a cache hit is timed as ``embed_cache``, the lookup, instead,
:mod:`service.search.query_cache`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from service.errors import BadRequest, Conflict
from service.observability.tracing import stage
from service.quality.outcome import SearchOutcome
from service.search.query_cache import QueryEmbeddingCache, QueryKey
from service.sparse.bm25 import encoder
from service.store.base import VectorStore
from service.store.errors import CollectionImporting
from service.store.tenancy import Tenant, read_scope
from service.store.types import Filter, Fusion, Hit, SparseVector, both
from service.upstream.embeddings import EmbeddingClient
from service.upstream.rerank import RerankClient

DEFAULT_RERANK_CANDIDATES = 30
StageObserver = Callable[[str, float], None]


SearchObserver = Callable[[SearchOutcome], None]


@dataclass(frozen=True)
class RankedHit:
    hit: Hit
    score: float
    rerank_score: float | None
    dense_score: float | None = None
    """With ``score_details``: the hit's cosine similarity (None in a sparse search)."""
    bm25_score: float | None = None
    """With ``score_details``: the hit's BM25 score; None in a dense search, or where the hit shares no term with
    the query."""


@dataclass
class SearchResult:
    hits: list[RankedHit]
    reranked: bool
    mode: str
    timings_ms: dict[str, float] = field(default_factory=dict)
    """Milliseconds per stage, numbers only: a query's vector is ``embed`` (the runner's) or ``embed_cache`` (a hit)."""


@dataclass(frozen=True)
class SearchQuery:
    collection: str
    query: str
    top_k: int
    query_filter: Filter | None = None
    rerank: bool | None = None
    """None: rerank when a reranker is configured."""
    rerank_candidates: int | None = None
    rerank_instruction: str | None = None
    embed_instruction: str | None = None
    mode: str | None = None
    """dense, sparse or hybrid; None: hybrid where the collection has sparse vectors, else dense."""
    fusion: str | None = None
    """rrf or dbsf for hybrid; None: the configured default."""
    tenant: Tenant | None = None
    """The searching key's tenant: hits come from its chunks only, BM25 counts over its chunks only."""
    score_details: bool = False
    """Report each hit's dense and BM25 scores beside the fused one: a hybrid search then asks the store for
    them (two more engine queries, restricted to the hits returned), so it is asked for, not always paid."""
    cache_partition: str | None = None
    """Whose cached query vectors this search may use and fill (:func:`service.search.query_cache.partition_of` of
    the searching key); None: the cache is not used (a caller that does not say whose search it is shares nothing)."""


class SearchService:
    def __init__(
        self,
        store: VectorStore,
        embedder: EmbeddingClient,
        reranker: RerankClient | None,
        *,
        max_rerank_candidates: int = 200,
        observe_stage: StageObserver | None = None,
        fusion: Fusion | None = None,
        query_cache: QueryEmbeddingCache | None = None,
        observe_search: SearchObserver | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        self._max_candidates = max_rerank_candidates
        self._observe = observe_stage or (lambda stage, seconds: None)
        self.fusion = fusion or Fusion()
        self.query_cache = query_cache
        self._observe_search = observe_search or (lambda outcome: None)

    async def search(self, q: SearchQuery) -> SearchResult:
        rerank = self.reranker is not None if q.rerank is None else q.rerank
        if rerank and self.reranker is None:
            raise BadRequest("this deployment's profile has no reranker", code="reranker_not_configured",
                             param="rerank")
        timings: dict[str, float] = {}
        started = time.perf_counter()

        info = await self.store.describe(q.collection)
        if info.importing is not None:  # an unfinished import: its hits would be a part of the collection's
            raise CollectionImporting(q.collection, info.importing)
        try:
            self.embedder.model.check_dimensions(info.dimensions)
        except ValueError as exc:
            raise Conflict(f"collection {q.collection!r} cannot be searched: {exc}", code="dimension_mismatch") from exc
        limit = q.top_k
        if rerank:
            limit = min(max(q.top_k, q.rerank_candidates or DEFAULT_RERANK_CANDIDATES), self._max_candidates)

        mode = q.mode or ("hybrid" if info.sparse else "dense")
        if mode != "dense" and info.sparse is None:
            raise BadRequest(
                f"collection {q.collection!r} has no sparse (BM25) vectors: use mode 'dense', or create the "
                "collection with sparse enabled", code="sparse_not_enabled", param="mode",
            )
        dense = sparse = None
        if mode in ("dense", "hybrid"):
            t = time.perf_counter()
            with stage("embed", collection=q.collection, mode=mode) as span:
                dense, cached = await self._embed_query(q, info.dimensions)
                span.set_attribute("ragserve.embed_cached", cached)
            if cached:
                timings["embed_cache"] = _ms(t)
            else:
                timings["embed"] = self._stage("embed", t)
        if info.sparse is not None and mode in ("sparse", "hybrid"):
            sparse = encoder(info.sparse).encode_query(q.query)
            if not sparse.indices and mode == "sparse":
                raise BadRequest("the query has no searchable terms (only stop-words or punctuation)",
                                 code="empty_sparse_query", param="query")
            if not sparse.indices:  # hybrid degrades to dense for a query of stop-words only, and says so
                sparse, mode = None, "dense"
        fusion = self.fusion if q.fusion is None else replace(self.fusion, method=q.fusion)
        scope = read_scope(q.tenant)

        t = time.perf_counter()
        with stage("store", collection=q.collection, mode=mode, limit=limit) as span:
            hits = await self.store.query(q.collection, dense=dense, sparse=sparse, limit=limit,
                                          query_filter=both(scope, q.query_filter), fusion=fusion,
                                          idf_corpus=scope)
            span.set_attribute("ragserve.hits", len(hits))
        timings["search"] = self._stage("search", t)

        reranked = bool(rerank and hits and self.reranker is not None)
        if reranked and self.reranker is not None:
            t = time.perf_counter()
            with stage("rerank", collection=q.collection, mode=mode, candidates=len(hits)):
                scores = await self.reranker.rerank(q.query, [h.text for h in hits],
                                                    instruction=q.rerank_instruction)
            timings["rerank"] = self._stage("rerank", t)
            ranked = [RankedHit(hits[s.index], s.score, s.score) for s in scores[: q.top_k]]
        else:
            ranked = [RankedHit(h, h.score, None) for h in hits[: q.top_k]]
        self._observe_search(SearchOutcome(
            q.collection, mode, restricted=scope is not None or q.query_filter is not None, hits=len(ranked),
            top_score=hits[0].score if hits else None, reranked=reranked,
            rerank_top_score=ranked[0].rerank_score if reranked and ranked else None,
            rerank_changed=reranked and bool(ranked) and ranked[0].hit.id != hits[0].id,
        ))
        if q.score_details:
            ranked = await self._mode_scores(q, mode, ranked, dense, sparse, scope, timings)
        timings["total"] = round((time.perf_counter() - started) * 1000, 3)
        return SearchResult(hits=ranked, reranked=rerank, mode=mode, timings_ms=timings)

    async def _embed_query(self, q: SearchQuery, dimensions: int) -> tuple[list[float], bool]:
        """The query's vector, and whether it came from the cache. A miss embeds and fills; a failed or
        cancelled embedding fills nothing."""
        instruction = q.embed_instruction or None  # as the client reads it: empty is the deployment's own
        cache = self.query_cache
        if cache is None or not cache.enabled or q.cache_partition is None:
            return await self.embedder.embed_query(q.query, task=instruction, dimensions=dimensions), False
        key = QueryKey(q.cache_partition, self.embedder.model.name, instruction, dimensions, q.query)
        vector = cache.get(key)
        if vector is not None:
            return vector, True
        vector = await self.embedder.embed_query(q.query, task=instruction, dimensions=dimensions)
        cache.put(key, vector)
        return vector, False

    async def _mode_scores(self, q: SearchQuery, mode: str, ranked: list[RankedHit], dense: list[float] | None,
                           sparse: SparseVector | None, scope: Filter | None,
                           timings: dict[str, float]) -> list[RankedHit]:
        """``ranked`` with each hit's dense and BM25 scores. A one-mode search already has its one score (the
        engine's); a fused one asks the store for both, over the same IDF corpus as the fused query."""
        if dense is not None and sparse is not None:
            t = time.perf_counter()
            with stage("score_details", collection=q.collection, mode=mode, hits=len(ranked)):
                scores = await self.store.mode_scores(q.collection, [r.hit.id for r in ranked], dense=dense,
                                                      sparse=sparse, idf_corpus=scope)
            timings["score_details"] = self._stage("score_details", t)
            return [replace(r, dense_score=scores[r.hit.id].dense, bm25_score=scores[r.hit.id].bm25) for r in ranked]
        if dense is not None:  # dense mode, or hybrid with a query of stop-words only (no BM25 query at all)
            return [replace(r, dense_score=r.hit.score) for r in ranked]
        return [replace(r, bm25_score=r.hit.score) for r in ranked]

    def _stage(self, stage: str, started: float) -> float:
        seconds = time.perf_counter() - started
        self._observe(stage, seconds)
        return round(seconds * 1000, 3)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
