"""OpenAI-compatible chat completions (grounded with the ``ragserve`` extension); the models are listed by
``service.api.routes.models``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from service.api.cancellation import with_cancellation
from service.api.deps import ApiKey, PrincipalDep, ServicesDep
from service.api.json_body import JsonRoute
from service.api.schemas.chat import ChatCompletionRequest
from service.api.schemas.errors import error_responses
from service.api.state import Services
from service.api.streaming import RelayResponse
from service.errors import BadRequest
from service.generation.chat import ChatHandler
from service.search.query_cache import partition_of

router = APIRouter(prefix="/v1", tags=["generation"], dependencies=[ApiKey],
                   responses=error_responses(404, 409, 415, 502), route_class=JsonRoute)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _chat(services: Services) -> ChatHandler:
    if services.chat is None:
        raise BadRequest("this deployment serves no generation model (RAGSERVE_GENERATION__*)",
                         code="generation_not_configured")
    return services.chat


@router.post(
    "/chat/completions",
    summary="OpenAI-compatible chat; with `ragserve: {collections}` a grounded answer with citations",
    response_model=None,
)
@with_cancellation
async def chat_completions(
    body: ChatCompletionRequest, services: ServicesDep, principal: PrincipalDep, raw_request: Request
) -> dict[str, Any] | RelayResponse:
    if body.ragserve is not None:
        for i, name in enumerate(body.ragserve.collections):
            principal.check_collection(name, param=f"ragserve.collections[{i}]")
    handler = _chat(services)
    prepared = await handler.prepare(body.to_chat_request(), tenant=principal.tenant,
                                     cache_partition=partition_of(principal), key_id=principal.id)
    if body.stream:
        events = await handler.open_stream(prepared)
        return RelayResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
    return await handler.complete(prepared)
