from __future__ import annotations

from fastapi import APIRouter, Request

from service.api.cancellation import with_cancellation
from service.api.deps import ApiKey, ServicesDep
from service.api.schemas.errors import ERROR_RESPONSES
from service.api.schemas.search import SearchHit, SearchRequest, SearchResponse
from service.errors import InvalidInput
from service.search.filters import build_filter
from service.search.service import SearchQuery

router = APIRouter(prefix="/v1", tags=["search"], dependencies=[ApiKey], responses=ERROR_RESPONSES)


@router.post("/search", summary="Embed the query, search a collection, rerank; ranked context for a chat app")
@with_cancellation
async def search(body: SearchRequest, services: ServicesDep, raw_request: Request) -> SearchResponse:
    limits = services.settings.limits
    query = body.query.strip()
    if not query:
        raise InvalidInput("query is empty", code="empty_query", param="query")
    if len(query) > limits.max_query_chars:
        raise InvalidInput(f"query is longer than {limits.max_query_chars} characters", code="query_too_long",
                           param="query")
    if body.top_k > limits.max_top_k:
        raise InvalidInput(f"top_k is over {limits.max_top_k}", code="top_k_too_large", param="top_k")
    rerank = body.rerank
    result = await services.search.search(
        SearchQuery(
            collection=body.collection,
            query=query,
            top_k=body.top_k,
            query_filter=build_filter(body.filter),
            rerank=None if rerank is None else rerank.enabled,
            rerank_candidates=None if rerank is None else rerank.top_n,
            rerank_instruction=None if rerank is None else rerank.instruction,
            embed_instruction=body.instruction,
            mode=body.mode,
            fusion=body.fusion,
        )
    )
    hits = [
        SearchHit(rank=i + 1, id=r.hit.id, doc_id=r.hit.doc_id, chunk_index=r.hit.chunk_index, text=r.hit.text,
                  metadata=r.hit.metadata, location=r.hit.location, score=r.score, vector_score=r.hit.score,
                  rerank_score=r.rerank_score)
        for i, r in enumerate(result.hits)
    ]
    return SearchResponse(collection=body.collection, query=query, reranked=result.reranked, mode=result.mode,
                          hits=hits,
                          timings_ms=result.timings_ms)
