"""POST /v1/context: a budgeted, de-duplicated, cited context in one call (the use case: service/context/)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from service.api.cancellation import with_cancellation
from service.api.deps import ApiKey, PrincipalDep, ServicesDep
from service.api.json_body import JsonRoute
from service.api.schemas.chat import ImagePart
from service.api.schemas.common import filter_spec
from service.api.schemas.context import (
    ContextPassage,
    ContextRequest,
    ContextResponse,
    DroppedCandidate,
    QueryRewrite,
)
from service.api.schemas.errors import error_responses
from service.context import service as use_case
from service.media.service import ImageInput
from service.search.query_cache import partition_of

router = APIRouter(prefix="/v1", tags=["search"], dependencies=[ApiKey],
                   responses=error_responses(404, 409, 502, 503), route_class=JsonRoute)


@router.post("/context", summary="A budgeted, de-duplicated, cited context for a question or a conversation")
@with_cancellation
async def context(body: ContextRequest, services: ServicesDep, principal: PrincipalDep,
                  raw_request: Request) -> ContextResponse:
    collections = list(body.collections or []) + ([body.collection] if body.collection else [])
    for name in collections:
        principal.check_collection(name, param="collections" if body.collections else "collection")
    rerank = body.rerank
    result = await services.context.assemble(use_case.ContextRequest(
        collections=collections, budget_tokens=body.budget_tokens, query=body.query,
        messages=None if body.messages is None else turns(body),
        filter=filter_spec(body.filter), mode=body.mode, fusion=body.fusion,
        rerank=None if rerank is None else rerank.enabled, rerank_candidates=None if rerank is None else rerank.top_n,
        rerank_instruction=None if rerank is None else rerank.instruction, instruction=body.instruction,
        candidates=body.candidates, tokenizer=body.tokenizer, neighbours=body.neighbours, order=body.order,
        template=body.template, overflow=body.overflow, max_passages=body.max_passages, rewrite=body.rewrite,
    ), tenant=principal.tenant, cache_partition=partition_of(principal), key_id=principal.id)
    return ContextResponse(
        search_id=result.search_id, context=result.context, tokens=result.tokens, tokenizer=result.tokenizer,
        query_used=result.query_used,
        generated_query=result.generated_query, reranked=result.reranked,
        query_rewrite=None if result.rewrite is None else QueryRewrite(
            used=result.rewrite.used, fallback=result.rewrite.fallback, prompt_version=result.rewrite.prompt_version),
        passages=[ContextPassage(**p.reported()) for p in result.passages],
        dropped=[DroppedCandidate(
            collection=d.candidate.collection, doc_id=d.candidate.hit.doc_id, chunk_index=d.candidate.hit.chunk_index,
            score=d.candidate.score, reason=d.reason, passage=None if d.passage is None else d.passage.number,
        ) for d in result.dropped],
        timings_ms=result.timings_ms,
    )


def turns(body: ContextRequest) -> list[use_case.Turn]:
    out = []
    for i, message in enumerate(body.messages or []):
        content = message.content
        if content is None or isinstance(content, str):
            out.append(use_case.Turn(message.role, content or ""))
            continue
        text = "\n".join(part.text for part in content if not isinstance(part, ImagePart))
        images = [(j, part) for j, part in enumerate(content) if isinstance(part, ImagePart)]
        image = None
        if images:
            j, part = images[-1]
            image = ImageInput(param=f"messages[{i}].content[{j}].image_url.url", url=part.image_url.url)
        out.append(use_case.Turn(message.role, text, image))
    return out
