"""Retrieval as a use case: the limits every way in meets, the image -> query stage, and the stage timings
around :class:`~service.search.service.SearchService`.

``/v1/search`` (JSON and upload), ``/v1/context``, grounded chat and the MCP tools each translate their input
into a :class:`RetrievalRequest` and call :meth:`Retrieval.search`, or, where they retrieve for several
collections at once, :meth:`Retrieval.check` and :meth:`Retrieval.image_query` once and the search service per
collection. A route holds none of these steps, so every way in refuses the same input with the same code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from service.config import Limits
from service.errors import BadRequest, InvalidInput
from service.media.images import PreparedImage
from service.media.service import ImageInput, MediaService
from service.observability.tracing import stage
from service.quality.records import RecordedHit
from service.search.filters import build_filter
from service.search.service import SearchQuery, SearchResult, SearchService
from service.store.tenancy import Tenant

if TYPE_CHECKING:
    from service.quality.log import QualityLog

StageObserver = Callable[[str, float], None]


class WrittenQuery(Protocol):
    generated: str
    retrieval_query: str


class ImageQueryWriter(Protocol):
    """What writes a query from an image (:class:`service.generation.image_query.ImageQueryWriter`): named here
    as a protocol so that search does not import generation, which imports search."""

    async def write(self, image: PreparedImage, text: str = "") -> WrittenQuery: ...


@dataclass(frozen=True)
class Params:
    """Where each checked field sits in the caller's request, for the ``param`` of a refusal."""

    query: str = "query"
    top_k: str = "top_k"
    rerank_candidates: str = "rerank.top_n"


@dataclass(frozen=True)
class RetrievalRequest:
    """One search as any way in asks for it, in domain terms (no wire schema)."""

    collection: str
    query: str
    """The user's words; may be empty when ``image`` is given."""
    top_k: int
    image: ImageInput | None = None
    filter: dict[str, Any] | None = None
    """Plain filter conditions, as :func:`service.search.filters.build_filter` reads them."""
    rerank: bool | None = None
    rerank_candidates: int | None = None
    rerank_instruction: str | None = None
    embed_instruction: str | None = None
    mode: str | None = None
    fusion: str | None = None
    score_details: bool = False
    params: Params = field(default_factory=Params)


@dataclass(frozen=True)
class ImageQueryResult:
    query: str
    """What is embedded and reranked: the user's words, then what the VL model wrote."""
    generated: str
    image: PreparedImage
    timings_ms: dict[str, float]


@dataclass
class Retrieved:
    query: str
    result: SearchResult
    image: ImageQueryResult | None = None
    search_id: str | None = None
    """The search's id for feedback (None where no quality log is set up: tests of the pipeline alone)."""


class Retrieval:
    def __init__(self, search: SearchService, media: MediaService, image_queries: ImageQueryWriter | None,
                 limits: Limits, *, observe_stage: StageObserver | None = None,
                 quality: QualityLog | None = None) -> None:
        self.search_service = search
        self.quality = quality
        self.media = media
        self.image_queries = image_queries
        self.limits = limits
        self._observe = observe_stage or (lambda stage, seconds: None)

    def check(self, *, query: str, top_k: int, rerank_candidates: int | None = None, has_image: bool = False,
              params: Params = Params()) -> str:
        """The stripped query, or the refusal every way in gives for these values."""
        limits = self.limits
        query = query.strip()
        if not query and not has_image:
            raise InvalidInput("query is empty (send a query, an image, or both)", code="empty_query",
                               param=params.query)
        if len(query) > limits.max_query_chars:
            raise InvalidInput(f"query is longer than {limits.max_query_chars} characters", code="query_too_long",
                               param=params.query)
        if top_k > limits.max_top_k:
            raise InvalidInput(f"top_k is over {limits.max_top_k}", code="top_k_too_large", param=params.top_k)
        if rerank_candidates is not None and rerank_candidates > limits.max_rerank_candidates:
            raise InvalidInput(f"{params.rerank_candidates} is over {limits.max_rerank_candidates}",
                               code="top_n_too_large", param=params.rerank_candidates)
        return query

    async def image_query(self, image: ImageInput | PreparedImage, text: str, *,
                          collection: str | None = None) -> ImageQueryResult:
        """Turn an image (fetched or decoded here when it is still an input) and the user's words into the
        query that is searched. 400 ``generation_not_configured`` without a generation model."""
        if self.image_queries is None:
            param = image.param if isinstance(image, ImageInput) else "image"
            raise BadRequest("this deployment serves no generation model, so it cannot search with an image",
                             code="generation_not_configured", param=param)
        timings: dict[str, float] = {}
        started = time.perf_counter()
        if isinstance(image, ImageInput):
            image = await self.media.prepare(image)
            timings["image"] = _ms(started)
        t = time.perf_counter()
        attributes = {} if collection is None else {"collection": collection}
        with stage("image_query", **attributes):
            written = await self.image_queries.write(image, text)
        timings["image_query"] = _ms(t)
        self._observe("image_query", time.perf_counter() - t)
        return ImageQueryResult(written.retrieval_query, written.generated, image, timings)

    async def search(self, request: RetrievalRequest, *, tenant: Tenant | None = None,
                     cache_partition: str | None = None, key_id: str = "") -> Retrieved:
        """A search for ``tenant`` (its chunks only), checked, with the image's query written first when there is
        one; ``timings_ms`` then holds the image stages and the total over all of them. ``key_id``: the searching
        key's, kept in the search's record so that only its tenant may rate it."""
        query = self.check(query=request.query, top_k=request.top_k, rerank_candidates=request.rerank_candidates,
                           has_image=request.image is not None, params=request.params)
        started = time.perf_counter()
        image = None
        if request.image is not None:
            image = await self.image_query(request.image, query, collection=request.collection)
            query = image.query
        result = await self.search_service.search(self.query(request, query, tenant=tenant,
                                                             cache_partition=cache_partition))
        if image is not None:
            result.timings_ms = {**image.timings_ms, **result.timings_ms, "total": _ms(started)}
        search_id = None
        if self.quality is not None:
            search_id = self.quality.record(
                key_id=key_id, tenant=tenant, query=query, collections=[request.collection], mode=result.mode,
                reranked=result.reranked, filter=request.filter, timings_ms=result.timings_ms,
                hits=[RecordedHit(request.collection, r.hit.id, r.hit.doc_id, r.hit.score, r.rerank_score)
                      for r in result.hits])
        return Retrieved(query, result, image, search_id)

    async def search_collections(self, request: RetrievalRequest, query: str, collections: list[str], *,
                                 tenant: Tenant | None = None,
                                 cache_partition: str | None = None) -> list[SearchResult]:
        """``query`` (already checked, and written from the image where there is one) searched in each collection
        at once, ``request`` giving everything else; the results in the order of ``collections``."""
        return list(await asyncio.gather(*(
            self.search_service.search(self.query(replace(request, collection=name), query, tenant=tenant,
                                                  cache_partition=cache_partition))
            for name in collections
        )))

    @staticmethod
    def query(request: RetrievalRequest, query: str, *, tenant: Tenant | None,
              cache_partition: str | None) -> SearchQuery:
        return SearchQuery(
            collection=request.collection,
            query=query,
            top_k=request.top_k,
            query_filter=build_filter(request.filter),
            rerank=request.rerank,
            rerank_candidates=request.rerank_candidates,
            rerank_instruction=request.rerank_instruction,
            embed_instruction=request.embed_instruction,
            mode=request.mode,
            fusion=request.fusion,
            tenant=tenant,
            score_details=request.score_details,
            cache_partition=cache_partition,
        )


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
