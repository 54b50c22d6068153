"""Delete by filter. A POST to an action below the documents, as Qdrant's own ``points/delete`` is: a DELETE
with a body is dropped or refused by some proxies and clients, and a dry run is not a deletion."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import ApiKey, PrincipalDep, ServicesDep
from service.api.json_body import JsonRoute
from service.api.routes.collections import CollectionName
from service.api.schemas.common import filter_spec
from service.api.schemas.deletion import MAX_LISTED_IDS, DeleteByFilter, DeleteByFilterResult
from service.api.schemas.errors import error_responses
from service.documents.deletion import delete_matching
from service.errors import BadRequest
from service.search.filters import build_filter
from service.store.tenancy import write_scope

router = APIRouter(prefix="/v1/collections", tags=["collections"], dependencies=[ApiKey],
                   responses=error_responses(404, 507), route_class=JsonRoute)


@router.post("/{name}/documents/delete",
             summary="Delete every document matching a filter (whole), or count them first with dry_run")
async def delete_by_filter(body: DeleteByFilter, services: ServicesDep, principal: PrincipalDep,
                           name: str = CollectionName) -> DeleteByFilterResult:
    if body.all and body.filter:
        raise BadRequest("send a filter or all: true, not both", code="filter_with_all", param="all")
    if not body.filter and not body.all:
        raise BadRequest("an empty filter would delete every document: send all: true to mean that",
                         code="empty_filter", param="filter")
    where = None if body.all else build_filter(filter_spec(body.filter))
    await services.store.describe(name)  # 404 for an unknown collection, before any scan
    deletion = await delete_matching(services.store, name, where, dry_run=body.dry_run,
                                     scope=write_scope(principal.tenant))  # a key deletes only what it may write
    return DeleteByFilterResult(
        collection=name, dry_run=body.dry_run, documents=len(deletion.doc_ids), chunks=deletion.chunks,
        doc_ids=deletion.doc_ids[:MAX_LISTED_IDS], doc_ids_truncated=len(deletion.doc_ids) > MAX_LISTED_IDS,
    )
