"""A collection as an export stream (``service.transfer.format``), produced as it is read: one store page at a
time, compressed as it goes, so memory stays constant whatever the collection's size."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timezone

from service import __version__
from service.store.base import VectorStore
from service.store.errors import CollectionImporting
from service.store.types import CollectionInfo
from service.transfer.format import FORMAT, VERSION, ExportHeader, ExportWriter

PAGE_SIZE = 256
"""Points per store page (1024-dim points: about 1.5 MB of JSON per page)."""


def header_of(info: CollectionInfo, backend: str) -> ExportHeader:
    """Every setting of the collection, and a new export id."""
    return ExportHeader(
        format=FORMAT, version=VERSION, export_id=uuid.uuid4().hex, collection=info.name, model=info.model or "",
        dimensions=info.dimensions, distance="cosine", filter_fields=dict(info.filter_fields), sparse=info.sparse,
        sparse_stats=info.sparse_stats, quantization=info.quantization, points=info.points,
        exported_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), ragserve_version=__version__,
        backend=backend,
    )


async def start_export(store: VectorStore, name: str, *, page_size: int = PAGE_SIZE) -> AsyncIterator[bytes]:
    """Check the collection now (404, 409 while it is importing), then stream it: the caller can answer an error
    before the first byte of a streamed body."""
    info = await store.get_collection(name)
    if info.importing is not None:
        raise CollectionImporting(name, info.importing)
    return _stream(store, info, page_size)


async def _stream(store: VectorStore, info: CollectionInfo, page_size: int) -> AsyncIterator[bytes]:
    writer = ExportWriter(header_of(info, store.backend))
    yield writer.header()
    async for page in store.export_points(info.name, page_size):
        if page:
            chunk = writer.points_bytes(page)
            if chunk:
                yield chunk
    yield writer.trailer()
