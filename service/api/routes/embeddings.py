"""OpenAI-compatible embeddings from the embedding runner, behind ragserve's auth and limits (the runner itself
stays on loopback)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import ValidationError

from service.api.deps import ApiKey, ServicesDep
from service.api.json_body import JsonRoute
from service.api.schemas.embeddings import EmbeddingsRequest, EmbeddingsResponse
from service.api.schemas.errors import error_responses
from service.errors import InvalidInput, PayloadTooLarge
from service.upstream.errors import UpstreamError

router = APIRouter(prefix="/v1", tags=["runners"], dependencies=[ApiKey], responses=error_responses(502),
                   route_class=JsonRoute)


@router.post("/embeddings", summary="OpenAI-compatible embeddings from the embedding runner",
             response_model=EmbeddingsResponse)
async def embeddings(body: EmbeddingsRequest, services: ServicesDep) -> Response:
    """An input longer than the embedding model's window is cut to it (``truncate: END``, the default) or
    refused with a 422 ``input_too_long`` that names it (``truncate: NONE``)."""
    texts = body.texts()
    limits = services.settings.limits
    if len(texts) > limits.max_documents_per_request:
        raise PayloadTooLarge(f"over {limits.max_documents_per_request} inputs", code="too_many_inputs",
                              param="input")
    if body.dimensions is not None:
        try:
            services.embedder.model.check_dimensions(body.dimensions)
        except ValueError as exc:
            raise InvalidInput(str(exc), code="unsupported_dimensions", param="dimensions") from exc
    if body.truncate == "NONE":
        await services.embedder.check_fits(texts, single=isinstance(body.input, str))
    upstream = body.model_dump(exclude_none=True, exclude={"model", "truncate"})
    upstream["truncate_prompt_tokens"] = services.embedder.truncate_tokens
    if body.dimensions == services.embedder.model.dimensions:
        upstream.pop("dimensions")
    answer = await services.embedder.passthrough(upstream)
    try:  # the runner's answer, checked here: a shape it should not have is its fault (502), not ragserve's (500)
        checked = EmbeddingsResponse.model_validate(answer)
    except ValidationError as exc:
        raise UpstreamError(services.embedder.runner.name,
                            "its /v1/embeddings answer is not OpenAI's embeddings shape") from exc
    # Sent as checked: returning the model would have FastAPI validate every vector again against
    # response_model (which stays, for the OpenAPI document).
    return Response(checked.model_dump_json(by_alias=True), media_type="application/json")
