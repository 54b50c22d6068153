from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from service.api.cancellation import with_cancellation
from service.api.deps import ApiKey, PrincipalDep, ServicesDep
from service.api.json_body import BodyError, JsonRoute, parse_json
from service.api.schemas.common import filter_spec
from service.api.schemas.errors import error_responses
from service.api.schemas.search import ImageInfo, SearchRequest, SearchResponse
from service.api.state import Services
from service.auth.principal import Principal
from service.errors import BadRequest, InvalidInput
from service.media.errors import ImageTooLarge
from service.media.service import ImageInput
from service.search.query_cache import partition_of
from service.search.retrieval import RetrievalRequest

router = APIRouter(prefix="/v1", tags=["search"], dependencies=[ApiKey],
                   responses=error_responses(404, 409, 415, 502), route_class=JsonRoute)


@router.post("/search", summary="Embed the query, search a collection, rerank; ranked context for a chat app")
@with_cancellation
async def search(body: SearchRequest, services: ServicesDep, principal: PrincipalDep,
                 raw_request: Request) -> SearchResponse:
    principal.check_collection(body.collection)
    image = ImageInput(param="image.url", url=body.image.url) if body.image is not None else None
    return await run_search(body, image, services, principal)


@router.post(
    "/search/upload",
    summary="/v1/search with an uploaded image: multipart fields `request` (the JSON body) and `image` (a file)",
)
@with_cancellation
async def search_upload(
    request: Annotated[str, Form(description="The /v1/search JSON body, without `image`.")],
    image: UploadFile,
    services: ServicesDep,
    principal: PrincipalDep,
    raw_request: Request,
) -> SearchResponse:
    try:
        body = SearchRequest.model_validate(parse_json(request, what="the request field"))
    except BodyError as exc:
        raise BadRequest(str(exc.detail), code=exc.code, param="request") from exc
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", "request", *e.get("loc", ()))} for e in exc.errors(include_url=False)]
        ) from exc
    principal.check_collection(body.collection, param="request.collection")
    if body.image is not None:
        raise InvalidInput("send the image either as the upload or as image.url, not both", param="image")
    limit = services.settings.media.max_image_bytes
    data = await image.read(limit + 1)
    if len(data) > limit:
        raise ImageTooLarge(f"the uploaded image is over {limit} bytes", param="image")
    return await run_search(body, ImageInput(param="image", data=data), services, principal)


async def run_search(body: SearchRequest, image: ImageInput | None, services: Services,
                     principal: Principal) -> SearchResponse:
    """Translate a search request into the retrieval use case and its answer into the response, for
    ``principal`` (its tenant filters every query)."""
    retrieved = await services.retrieval.search(search_request(body, image), tenant=principal.tenant,
                                                cache_partition=partition_of(principal), key_id=principal.id)
    result = retrieved.result
    # Plain dicts, validated into SearchHits by the response's own validation, in one call for all of them,
    # not one SearchHit(...) call per hit (the JSON is the same).
    hits: list[Any] = [
        {"rank": i + 1, "id": r.hit.id, "doc_id": r.hit.doc_id, "chunk_index": r.hit.chunk_index, "text": r.hit.text,
         "metadata": r.hit.metadata, "location": r.hit.location, "score": r.score, "vector_score": r.hit.score,
         "rerank_score": r.rerank_score, "dense_score": r.dense_score, "bm25_score": r.bm25_score}
        for i, r in enumerate(result.hits)
    ]
    generated = info = None
    if retrieved.image is not None:
        prepared = retrieved.image.image
        generated = retrieved.image.generated
        info = ImageInfo(format=prepared.source_format, width=prepared.width, height=prepared.height,
                         source_width=prepared.source_width, source_height=prepared.source_height)
    return SearchResponse(search_id=retrieved.search_id, collection=body.collection, query=retrieved.query,
                          generated_query=generated, image=info,
                          reranked=result.reranked, mode=result.mode, hits=hits, timings_ms=result.timings_ms)


def search_request(body: SearchRequest, image: ImageInput | None) -> RetrievalRequest:
    rerank = body.rerank
    return RetrievalRequest(
        collection=body.collection,
        query=body.query or "",
        top_k=body.top_k,
        image=image,
        filter=filter_spec(body.filter),
        rerank=None if rerank is None else rerank.enabled,
        rerank_candidates=None if rerank is None else rerank.top_n,
        rerank_instruction=None if rerank is None else rerank.instruction,
        embed_instruction=body.instruction,
        mode=body.mode,
        fusion=body.fusion,
        score_details=body.score_details,
    )
