"""Feedback on a search's hits, the query log, and the quality summary the playground shows."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import ApiKey, PrincipalDep, ServicesDep
from service.api.json_body import JsonRoute
from service.api.schemas.errors import error_responses
from service.api.schemas.quality import (
    FeedbackRequest,
    FeedbackResponse,
    QualitySummary,
    QueryLogDeleted,
    QueryLogPage,
)

router = APIRouter(prefix="/v1", tags=["quality"], dependencies=[ApiKey], responses=error_responses(404),
                   route_class=JsonRoute)


@router.post("/feedback", summary="Rate a hit of a search: -1 wrong, 0 not relevant, 1 to 3 relevant")
async def feedback(body: FeedbackRequest, services: ServicesDep, principal: PrincipalDep) -> FeedbackResponse:
    result = await services.quality.feedback(principal, search_id=body.search_id, chunk_id=body.chunk_id,
                                             doc_id=body.doc_id, rating=body.rating, comment=body.comment)
    return FeedbackResponse(search_id=result.search_id, collection=result.collection, chunk_id=result.chunk_id,
                            doc_id=result.doc_id, rating=result.rating, stored=result.stored)


CURSOR = r"^[0-9]+(\.[0-9]+)?,s_[0-9a-f]{32}$"


def _cursor(value: str | None) -> tuple[float, str] | None:
    if value is None:
        return None
    at, _, search_id = value.partition(",")
    return float(at), search_id  # the pattern above holds


@router.get("/querylog", summary="Logged searches with their feedback: every tenant's for an admin key, its "
            "tenant's for a key bound to one")
async def query_log(
    services: ServicesDep, principal: PrincipalDep,
    since: Annotated[float | None, Query(ge=0, description="Rows searched at or after this time (Unix seconds).")]
    = None,
    until: Annotated[float | None, Query(ge=0, description="Rows searched before this time (Unix seconds).")] = None,
    after: Annotated[str | None, Query(pattern=CURSOR, description="The previous page's next_after.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> QueryLogPage:
    entries = await services.quality.read(principal, since=since, until=until, after=_cursor(after), limit=limit)
    rows = [e.to_dict() for e in entries]
    last = entries[-1].row if len(entries) == limit else None
    return QueryLogPage.model_validate(
        {"rows": rows, "next_after": None if last is None else f"{last.created_at!r},{last.search_id}"})


@router.delete("/querylog", summary="Delete a tenant's search records, log rows and feedback (admin)")
async def delete_tenant_rows(
    services: ServicesDep,
    tenant: Annotated[str, Query(min_length=3, max_length=320, pattern=r"^[^=]+=.+$",
                                 description="The tenant as field=value (a key's tenant binding).")],
) -> QueryLogDeleted:
    return QueryLogDeleted(tenant=tenant, rows=await services.quality.delete_tenant(tenant))


@router.get("/quality", summary="Zero-hit rate and top-score histogram of the searches this key may see")
async def quality_summary(
    services: ServicesDep, principal: PrincipalDep,
    hours: Annotated[float, Query(gt=0, le=24 * 30)] = 24.0,
    collection: Annotated[str | None, Query(max_length=64)] = None,
) -> QualitySummary:
    return QualitySummary.model_validate(await services.quality.summary(principal, hours=hours,
                                                                        collection=collection))
