"""Export a collection as a portable file, and import one: a collection moves between stores (the embedded one,
a Qdrant server) with zero embedding calls. Both bodies stream; the format is ``service.transfer.format``. Through
the API because an embedded store belongs to the serving process: no other process may open its folder."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from service.api.deps import ApiKey, ServicesDep
from service.api.routes.collections import CollectionName
from service.api.schemas.errors import error_responses
from service.api.schemas.transfer import ImportOut
from service.transfer.errors import ImportInterrupted
from service.transfer.exporter import start_export
from service.transfer.format import SUFFIX

router = APIRouter(prefix="/v1/collections", tags=["collections"], dependencies=[ApiKey],
                   responses=error_responses(404, 409, 507))
GZIP = "application/gzip"


@router.get("/{name}/export", summary="Export a collection (points, vectors, settings) as a .ragserve.jsonl.gz",
            response_class=StreamingResponse,
            responses={200: {"content": {GZIP: {}}, "description": "The export file, streamed."}})
async def export_collection(services: ServicesDep, name: str = CollectionName) -> StreamingResponse:
    stream = await start_export(services.store, name)  # 404 / 409 before the first byte
    return StreamingResponse(stream, media_type=GZIP,
                             headers={"Content-Disposition": f'attachment; filename="{name}{SUFFIX}"'})


@router.post("/{name}/import", summary="Import an export file into a collection (created, or empty), no embedding",
             description="The body is the file as `GET /v1/collections/{name}/export` wrote it "
             "(`Content-Type: application/gzip`), read as it streams. Running the same import again after an "
             "interruption finishes it; a damaged file (422) deletes the collection the import created.",
             openapi_extra={"requestBody": {"required": True, "content": {GZIP: {"schema": {
                 "type": "string", "format": "binary"}}}}})
async def import_collection(request: Request, services: ServicesDep, name: str = CollectionName) -> ImportOut:
    result = await services.importer.run(name, _body(request))
    return ImportOut(collection=result.collection, export_id=result.export_id, points=result.points,
                     stored=result.stored, created=result.created, resumed=result.resumed,
                     quantization=result.quantization)


async def _body(request: Request) -> AsyncIterator[bytes]:
    try:
        async for piece in request.stream():
            if piece:
                yield piece
    except ClientDisconnect:
        raise ImportInterrupted from None
