"""The runners' own APIs, behind ragserve's auth and limits (the runners themselves stay on loopback)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from service.api.deps import ApiKey, ServicesDep
from service.api.json_body import JsonRoute
from service.api.schemas.errors import error_responses
from service.api.schemas.passthrough import EmbeddingsRequest, RerankRequest
from service.errors import BadRequest, InvalidInput, PayloadTooLarge

router = APIRouter(prefix="/v1", tags=["runners"], dependencies=[ApiKey], responses=error_responses(502),
                   route_class=JsonRoute)


@router.post("/embeddings", summary="OpenAI-compatible embeddings from the embedding runner")
async def embeddings(body: EmbeddingsRequest, services: ServicesDep) -> Any:
    texts = [body.input] if isinstance(body.input, str) else body.input
    limits = services.settings.limits
    if not texts or any(not t for t in texts):
        raise InvalidInput("input must hold non-empty texts", code="empty_input", param="input")
    if len(texts) > limits.max_documents_per_request:
        raise PayloadTooLarge(f"over {limits.max_documents_per_request} inputs", code="too_many_inputs",
                              param="input")
    if body.dimensions is not None:
        try:
            services.embedder.model.check_dimensions(body.dimensions)
        except ValueError as exc:
            raise InvalidInput(str(exc), code="unsupported_dimensions", param="dimensions") from exc
    upstream = body.model_dump(exclude_none=True, exclude={"model"})
    upstream["truncate_prompt_tokens"] = services.embedder.truncate_tokens
    if body.dimensions == services.embedder.model.dimensions:
        upstream.pop("dimensions")
    return await services.embedder.passthrough(upstream)


@router.post("/rerank", summary="Cohere/Jina-compatible rerank from the reranker runner")
async def rerank(body: RerankRequest, services: ServicesDep) -> Any:
    """A document longer than the reranker's window is cut to fit it with the query and the prompt template
    (the document's tail goes, never the template's closing turn, where the score is read)."""
    if services.reranker is None:
        raise BadRequest("this deployment's profile has no reranker", code="reranker_not_configured")
    limits = services.settings.limits
    if len(body.documents) > limits.max_rerank_candidates:
        raise PayloadTooLarge(f"over {limits.max_rerank_candidates} documents", code="too_many_documents",
                              param="documents")
    return await services.reranker.passthrough(body.upstream_body())
