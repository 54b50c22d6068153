"""Cohere-compatible rerank, v1 and v2 (``service.api.schemas.rerank`` says what each field does), through
ragserve's own reranker path: the profile's score template and instruction, each document cut to the window
(the document's tail goes, never the template's closing turn, where the score is read), the limits, and the
error envelope."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter

from service.api.deps import ApiKey, ServicesDep
from service.api.json_body import JsonRoute
from service.api.schemas.errors import error_responses
from service.api.schemas.rerank import (
    ApiVersion,
    RerankMeta,
    RerankRequest,
    RerankResponse,
    RerankResult,
    RerankTokens,
    RerankV1Result,
    RerankV2Request,
    RerankV2Response,
)
from service.api.state import Services
from service.errors import BadRequest, PayloadTooLarge
from service.observability.context import current
from service.upstream.rerank import Ranking, RerankClient

router = APIRouter(tags=["runners"], dependencies=[ApiKey], responses=error_responses(502), route_class=JsonRoute)


def _reranker(services: Services) -> RerankClient:
    if services.reranker is None:
        raise BadRequest("this deployment's profile has no reranker", code="reranker_not_configured")
    return services.reranker


async def _rank(services: Services, reranker: RerankClient, query: str, texts: Sequence[str], *,
                instruction: str | None, max_tokens_per_doc: int | None = None) -> Ranking:
    limits = services.settings.limits
    if len(texts) > limits.max_rerank_candidates:
        raise PayloadTooLarge(f"over {limits.max_rerank_candidates} documents", code="too_many_documents",
                              param="documents")
    return await reranker.score(query, texts, instruction=instruction, max_tokens_per_doc=max_tokens_per_doc)


def _meta(version: str, ranking: Ranking) -> RerankMeta:
    tokens = None if ranking.prompt_tokens is None else RerankTokens(input_tokens=ranking.prompt_tokens)
    return RerankMeta(api_version=ApiVersion(version=version), tokens=tokens)  # type: ignore[arg-type]


def _request_id() -> str:
    context = current()
    return context.request_id if context is not None else ""


@router.post("/v1/rerank", summary="Cohere-compatible rerank (API v1) with the profile's reranker",
             response_model=RerankResponse, response_model_exclude_none=True)
async def rerank_v1(body: RerankRequest, services: ServicesDep) -> RerankResponse:
    reranker = _reranker(services)  # a deployment without one says so before any field is judged
    body.check_supported()
    ranking = await _rank(services, reranker, body.query, body.texts(), instruction=body.instruction)
    results = [
        RerankV1Result(index=r.index, relevance_score=r.score,
                       document=body.returned(r.index) if body.return_documents else None)
        for r in ranking.results[: body.top_n]
    ]
    return RerankResponse(id=_request_id(), results=results, meta=_meta("1", ranking))


@router.post("/v2/rerank", summary="Cohere-compatible rerank (API v2) with the profile's reranker",
             response_model=RerankV2Response, response_model_exclude_none=True)
async def rerank_v2(body: RerankV2Request, services: ServicesDep) -> RerankV2Response:
    reranker = _reranker(services)
    body.check_supported()
    ranking = await _rank(services, reranker, body.query, body.documents, instruction=body.instruction,
                          max_tokens_per_doc=body.max_tokens_per_doc)
    results = [RerankResult(index=r.index, relevance_score=r.score) for r in ranking.results[: body.top_n]]
    return RerankV2Response(id=_request_id(), results=results, meta=_meta("2", ranking))
