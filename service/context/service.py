"""``/v1/context`` as a use case: from a question or a conversation to a budgeted, de-duplicated, cited context.

1. The query: the request's, or the conversation's by the rule of :mod:`service.context.conversation`; an image
   in the last user turn takes the image -> query path search has (:class:`service.search.retrieval.Retrieval`).
2. Candidates: the same search and rerank as ``/v1/search``, ``candidates`` hits from each collection. With a
   reranker every hit was scored by one model against one query, so several collections merge by its score
   (``timings_ms.merge_rerank``); without one their scores do not compare, so they merge by reciprocal rank
   (``timings_ms.merge_rrf``).
3. Neighbours: with ``neighbours`` N, the chunks up to N before and after every candidate of its document are
   read from the store in one call per collection, by point id, under the reading key's scope.
4. Packing (:mod:`service.context.packing`): merged, de-duplicated, counted with the named tokenizer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.config import ContextSettings
from service.context.conversation import conversation_query
from service.context.packing import Dropped, Order, Overflow, Packer, PackOptions
from service.context.passages import Candidate, Passage, doc_key, span
from service.context.rewrite import REWRITE_PROMPT_VERSION, QueryRewriter
from service.context.template import DEFAULT_TEMPLATE, Template
from service.context.tokens import Tokenizers
from service.errors import InvalidInput
from service.media.images import PreparedImage
from service.media.service import ImageInput
from service.quality.records import RecordedHit
from service.search.retrieval import Params, Retrieval, RetrievalRequest
from service.search.service import SearchResult
from service.store.base import VectorStore
from service.store.tenancy import Tenant, read_scope
from service.store.types import Filter, HasId, Hit, both

StageObserver = Callable[[str, float], None]


@dataclass(frozen=True)
class Turn:
    role: str
    text: str
    image: ImageInput | PreparedImage | None = None
    """The turn's (last) image, for the last user turn's image -> query path."""


@dataclass(frozen=True)
class ContextRequest:
    collections: list[str]
    budget_tokens: int
    query: str | None = None
    messages: list[Turn] | None = None
    """Exactly one of ``query`` and ``messages``."""
    filter: dict[str, Any] | None = None
    mode: str | None = None
    fusion: str | None = None
    rerank: bool | None = None
    rerank_candidates: int | None = None
    rerank_instruction: str | None = None
    instruction: str | None = None
    candidates: int | None = None
    tokenizer: str | None = None
    neighbours: int | None = None
    order: Order = "score"
    template: str | None = None
    overflow: Overflow | None = None
    rewrite: bool | None = None
    """Rewrite a conversation with the generator (None: ``RAGSERVE_CONTEXT__REWRITE``)."""
    max_passages: int | None = None
    """At most this many passages (grounded chat's ``top_k``); None: as many as the budget holds."""


@dataclass(frozen=True)
class QueryRewrite:
    """How a conversation's query was made: by the generator (``used``), or by the rule, and why."""

    used: bool
    fallback: str | None = None
    prompt_version: int = REWRITE_PROMPT_VERSION


@dataclass
class ContextResult:
    context: str
    passages: list[Passage]
    tokens: int
    tokenizer: str
    query_used: str
    dropped: list[Dropped]
    reranked: bool
    merge: str
    """How candidates of several collections were ordered: ``rerank`` or ``rrf``."""
    generated_query: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    rewrite: QueryRewrite | None = None
    """For a conversation with earlier turns and a generator: what the rewrite did."""
    search_id: str | None = None
    """The context's id for feedback: its record holds every chunk of every passage."""


class ContextService:
    def __init__(self, retrieval: Retrieval, store: VectorStore, tokenizers: Tokenizers, settings: ContextSettings,
                 *, rewriter: QueryRewriter | None = None, observe_stage: StageObserver | None = None) -> None:
        self.retrieval = retrieval
        self.rewriter = rewriter
        self.store = store
        self.tokenizers = tokenizers
        self.settings = settings
        self._observe = observe_stage or (lambda stage, seconds: None)

    async def assemble(self, request: ContextRequest, *, tenant: Tenant | None = None,
                       cache_partition: str | None = None, key_id: str = "") -> ContextResult:
        started = time.perf_counter()
        cfg = self.settings
        packer, counter = await self._packer(request)
        collections = list(dict.fromkeys(request.collections))
        if not collections:
            raise InvalidInput("name a collection", code="no_collection", param="collections")
        if len(collections) > cfg.max_collections:
            raise InvalidInput(f"more than {cfg.max_collections} collections", code="too_many_collections",
                               param="collections")
        timings: dict[str, float] = {}
        text, image, params, rewrite = await self._question(request, timings)
        candidates = cfg.candidates if request.candidates is None else request.candidates
        query = self.retrieval.check(query=text, top_k=candidates, rerank_candidates=request.rerank_candidates,
                                     has_image=image is not None, params=params)
        generated = None
        if image is not None:
            written = await self.retrieval.image_query(image, query)
            timings.update(written.timings_ms)
            query, generated = written.query, written.generated
        base = RetrievalRequest(collection="", query=query, top_k=candidates, filter=request.filter,
                                rerank=request.rerank, rerank_candidates=request.rerank_candidates,
                                rerank_instruction=request.rerank_instruction, embed_instruction=request.instruction,
                                mode=request.mode, fusion=request.fusion, params=params)
        t = time.perf_counter()
        results = await self.retrieval.search_collections(base, query, collections, tenant=tenant,
                                                          cache_partition=cache_partition)
        timings["retrieve"] = self._stage("retrieve", t)
        t = time.perf_counter()
        reranked = all(r.reranked for r in results)
        ranked = merge_candidates(collections, results, reranked=reranked, rrf_k=cfg.rrf_k)
        merge = "rerank" if reranked else "rrf"
        timings[f"merge_{merge}"] = _ms(t)
        neighbours = {}
        if packer.options.neighbours > 0:
            t = time.perf_counter()
            neighbours = await self._neighbours(ranked, packer.options.neighbours, tenant)
            timings["neighbours"] = self._stage("neighbours", t)
        t = time.perf_counter()
        packed = await packer.pack(ranked, neighbours)
        timings["pack"] = self._stage("pack", t)
        timings["total"] = _ms(started)
        search_id = None
        quality = self.retrieval.quality
        if quality is not None:
            search_id = quality.record(
                key_id=key_id, tenant=tenant, query=query, collections=collections,
                mode=results[0].mode if results else "dense", reranked=reranked, filter=request.filter,
                timings_ms=timings,
                hits=[RecordedHit(p.collection, h.id, h.doc_id, p.score, p.rerank_score)
                      for p in packed.passages for h in p.chunks])
        return ContextResult(packed.context, packed.passages, packed.tokens, counter.name, query, packed.dropped,
                             reranked, merge, generated, timings, rewrite, search_id)

    async def _packer(self, request: ContextRequest) -> tuple[Packer, Any]:
        cfg = self.settings
        if request.budget_tokens > cfg.max_budget_tokens:
            raise InvalidInput(f"budget_tokens is over {cfg.max_budget_tokens}", code="budget_too_large",
                               param="budget_tokens")
        neighbours = cfg.neighbours if request.neighbours is None else request.neighbours
        if neighbours > cfg.max_neighbours:
            raise InvalidInput(f"neighbours is over {cfg.max_neighbours}", code="neighbours_too_large",
                               param="neighbours")
        template = Template.parse(DEFAULT_TEMPLATE if request.template is None else request.template)
        counter = self.tokenizers.get(request.tokenizer)
        packer = Packer(counter, PackOptions(
            budget=request.budget_tokens, template=template, neighbours=neighbours, order=request.order,
            overflow=request.overflow or cfg.overflow, duplicate_threshold=cfg.duplicate_threshold,
            documents_first=cfg.documents_first,
            max_passages=request.max_passages,
        ))
        least = await packer.min_budget()
        if request.budget_tokens < least:
            raise InvalidInput(f"budget_tokens is under {least}, the least that holds one passage's header in "
                               f"{counter.name}'s tokens", code="budget_too_small", param="budget_tokens")
        return packer, counter

    async def _question(self, request: ContextRequest, timings: dict[str, float],
                        ) -> tuple[str, ImageInput | PreparedImage | None, Params, QueryRewrite | None]:
        """The text to retrieve for, the last user turn's image, where they sit in the request, and what the
        rewrite did."""
        if (request.query is None) == (request.messages is None):
            raise InvalidInput("send exactly one of query and messages", code="query_or_messages", param="query")
        if request.query is not None:
            return request.query, None, Params(query="query", top_k="candidates"), None
        turns = request.messages or []
        users = [t for t in turns if t.role == "user"]
        if not users:
            raise InvalidInput("messages has no user turn to retrieve context for", code="no_user_turn",
                               param="messages")
        params = Params(query="messages", top_k="candidates")
        built = conversation_query([t.text for t in users], max_chars=self.retrieval.limits.max_query_chars)
        history = [t for t in turns[:-1] if t.role in ("user", "assistant") and t.text.strip()]
        wanted = self.settings.rewrite if request.rewrite is None else request.rewrite
        if self.rewriter is None or not wanted or not history or not users[-1].text.strip():
            return built.query, users[-1].image, params, None
        started = time.perf_counter()
        rewritten = await self.rewriter.rewrite([(t.role, t.text) for t in turns if t.role in ("user", "assistant")])
        timings["rewrite"] = self._stage("rewrite", started)
        if rewritten.query is None:
            return built.query, users[-1].image, params, QueryRewrite(False, rewritten.fallback)
        return rewritten.query, users[-1].image, params, QueryRewrite(True)

    async def _neighbours(self, ranked: Sequence[Candidate], n: int,
                          tenant: Tenant | None) -> dict[tuple[str, str | None, str], dict[int, Hit]]:
        """The chunks up to ``n`` before and after each candidate that is a slice of its document, read in one
        store call per collection."""
        wanted: dict[str, set[str]] = {}
        for c in ranked:
            if span(c.hit) is None:
                continue
            for i in range(max(c.hit.chunk_index - n, 0), c.hit.chunk_index + n + 1):
                if i != c.hit.chunk_index:
                    wanted.setdefault(c.collection, set()).add(c.hit.point_id_of(c.collection, i))
        out: dict[tuple[str, str | None, str], dict[int, Hit]] = {}
        scope = read_scope(tenant)
        for collection, ids in wanted.items():
            where = both(Filter(must=(HasId(tuple(sorted(ids))),)), scope)
            assert where is not None
            for hit in await self.store.read_chunks(collection, where, limit=len(ids)):
                out.setdefault(doc_key(collection, hit), {})[hit.chunk_index] = hit
        for c in ranked:  # the candidates themselves are their documents' chunks too
            out.setdefault(doc_key(c.collection, c.hit), {}).setdefault(c.hit.chunk_index, c.hit)
        return out

    def _stage(self, stage: str, started: float) -> float:
        seconds = time.perf_counter() - started
        self._observe(stage, seconds)
        return round(seconds * 1000, 3)


def merge_candidates(collections: Sequence[str], results: Sequence[SearchResult], *, reranked: bool,
                     rrf_k: int) -> list[Candidate]:
    """Every collection's hits as one ranking: by rerank score when one reranker scored them all, else (their
    scores do not compare across collections) by reciprocal rank, 1 / (rrf_k + rank), ties in the order the
    collections were named. A single collection keeps its own order and scores."""
    if len(collections) == 1:
        return [Candidate(collections[0], r.hit, r.score, r.rerank_score) for r in results[0].hits]
    if reranked:
        out = [Candidate(name, r.hit, r.score, r.rerank_score)
               for name, result in zip(collections, results, strict=True) for r in result.hits]
        return sorted(out, key=lambda c: -c.score)
    fused = [(rank, i, Candidate(name, r.hit, 1.0 / (rrf_k + rank), r.rerank_score))
             for i, (name, result) in enumerate(zip(collections, results, strict=True))
             for rank, r in enumerate(result.hits, 1)]
    return [c for _, _, c in sorted(fused, key=lambda x: (x[0], x[1]))]


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
