from __future__ import annotations

from dataclasses import asdict, replace

from fastapi import APIRouter, Path, status

from service.api.deps import ApiKey, PrincipalDep, ServicesDep
from service.api.json_body import JsonRoute
from service.api.schemas.collections import (
    COLLECTION_NAME,
    CollectionCreate,
    CollectionList,
    CollectionOut,
    DocumentsUpsert,
    IndexStatusOut,
    UpsertResult,
)
from service.api.schemas.errors import error_responses
from service.api.state import Services
from service.auth.principal import Principal
from service.documents.payload import ID_PATTERN
from service.documents.writer import NewDocument
from service.errors import InvalidInput, NotFound, PayloadTooLarge
from service.sparse.bm25 import SparseConfig
from service.store.tenancy import read_scope, write_scope
from service.store.types import CollectionInfo

router = APIRouter(prefix="/v1/collections", tags=["collections"], dependencies=[ApiKey],
                   responses=error_responses(404, 409, 502, 507), route_class=JsonRoute)
CollectionName = Path(pattern=COLLECTION_NAME, description="A collection name.")
DocId = Path(min_length=1, max_length=256, pattern=ID_PATTERN, description="A document id.")


def _out(info: CollectionInfo) -> CollectionOut:
    index = IndexStatusOut.model_validate(asdict(info.index)) if info.index is not None else None
    return CollectionOut(name=info.name, dimensions=info.dimensions, points=info.points, model=info.model,
                         filter_fields=info.filter_fields, sparse=info.sparse, index=index)


async def _as_seen_by(info: CollectionInfo, principal: Principal, services: Services) -> CollectionInfo:
    """A tenant key counts its own chunks only (how much the other tenants hold is none of its business, so the
    index's counts are left out too)."""
    scope = read_scope(principal.tenant)
    if scope is None:
        return info
    return replace(info, points=await services.store.count(info.name, scope), index=None)


@router.post("", status_code=status.HTTP_201_CREATED, summary="Create a collection")
async def create_collection(body: CollectionCreate, services: ServicesDep, principal: PrincipalDep) -> CollectionOut:
    principal.check_collection(body.name, param="name")
    model = services.embedder.model
    dims = body.dimensions or services.embedder.dimensions
    try:
        model.check_dimensions(dims)
    except ValueError as exc:
        raise InvalidInput(str(exc), code="unsupported_dimensions", param="dimensions") from exc
    existing = await services.store.list_collections()
    if len(existing) >= services.settings.limits.max_collections:
        raise PayloadTooLarge("too many collections", code="too_many_collections")
    if isinstance(body.sparse, SparseConfig):
        sparse: SparseConfig | None = SparseConfig.model_validate(body.sparse.model_dump())
    else:
        sparse = SparseConfig() if body.sparse else None
    info = await services.store.create_collection(
        body.name, dimensions=dims, model=model.name, filter_fields=dict(body.filter_fields), sparse=sparse
    )
    return _out(info)


@router.get("", summary="List collections (those the key may reach)")
async def list_collections(services: ServicesDep, principal: PrincipalDep) -> CollectionList:
    infos = [i for i in await services.store.list_collections() if principal.may_reach(i.name)]
    return CollectionList(collections=[_out(await _as_seen_by(i, principal, services)) for i in infos])


@router.get("/{name}", summary="Describe a collection")
async def get_collection(services: ServicesDep, principal: PrincipalDep, name: str = CollectionName) -> CollectionOut:
    return _out(await _as_seen_by(await services.store.get_collection(name), principal, services))


@router.post("/{name}/index", status_code=status.HTTP_202_ACCEPTED,
             summary="Build the collection's index now, in the background")
async def build_index(services: ServicesDep, name: str = CollectionName) -> CollectionOut:
    """Embedded store: start a background build of the collection's index (HNSW, or what the collection's
    quantization asks) whatever RAGSERVE_QDRANT__EDGE_BUILD_THRESHOLD says; searches and writes go on. Poll
    `GET /v1/collections/{name}` for its `index`. A Qdrant server indexes on its own: the description only."""
    return _out(await services.store.build_index(name))


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, summary="Delete a collection and its points")
async def delete_collection(services: ServicesDep, name: str = CollectionName) -> None:
    await services.store.delete_collection(name)


@router.delete("/{name}/documents/{doc_id:path}", status_code=status.HTTP_204_NO_CONTENT,
               summary="Delete a document and all its chunks")
async def delete_document(services: ServicesDep, principal: PrincipalDep, name: str = CollectionName,
                          doc_id: str = DocId) -> None:
    scope = write_scope(principal.tenant)  # a tenant's delete reaches its own documents only
    if not await services.store.doc_states(name, doc_ids=[doc_id], scope=scope):
        raise NotFound(f"document {doc_id!r} is not in collection {name!r}", code="document_not_found",
                       param="doc_id")
    await services.store.delete_documents(name, [doc_id], scope=scope)


@router.post("/{name}/documents", summary="Upsert already-split text documents (synchronous, batched)")
async def upsert_documents(body: DocumentsUpsert, services: ServicesDep, principal: PrincipalDep,
                           name: str = CollectionName) -> UpsertResult:
    documents = [NewDocument(d.id, d.text, d.metadata, d.vector) for d in body.documents]
    result = await services.writer.write(name, documents, tenant=principal.tenant)
    return UpsertResult(collection=name, upserted=result.upserted, embedded=result.embedded,
                        timings_ms=result.timings_ms)
