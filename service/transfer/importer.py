"""An export stream into a collection, with zero embedding calls: the file's vectors are stored as they are.

The target is created with the header's settings (dimensions, model, filter fields, BM25 settings and length
statistics), or is an existing empty collection whose settings match. Points go in with the store's ``upsert``
in batches of :data:`BATCH` while the body is still arriving (constant memory). Ids come from the target's name
(``Chunk.id_in``), so importing the same file twice stores every point once.

Quantization. The header's ``quantization`` (``int8`` or ``hnsw-int8``: the source's int8 copies, with no graph or
with one) is recorded on the target after the trailer has checked the file, where its backend records one (the
embedded store): its dense searches oversample and rescore at once, and its next build (in the background, or
``ragserve optimize``) builds the int8 copy (never
here: that holds the engine for minutes). Elsewhere (the server backend) it is left out, with a warning. A file
without the field (written before it was carried) imports as it always did.

Resuming. The collection is marked ``importing: <export id>`` before its first point and cleared after the
trailer has checked the file. An import cut off (the client went away, the service was killed) leaves the mark:
searches and exports of the collection answer 409 ``collection_importing``, and running the same import again
(the same file: the same export id) upserts every point again and clears it. A file found corrupt or truncated
deletes the collection the import created; one that existed before is left as it was.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np

from service.profiles import EmbeddingModel
from service.sparse.config import SparseStats
from service.store.base import VectorStore
from service.store.errors import CollectionImporting, CollectionNotFound
from service.store.types import CollectionInfo
from service.transfer.errors import ImportConflict, InvalidExport
from service.transfer.format import ExportHeader, ExportReader, ImportPoint

log = logging.getLogger("ragserve.transfer")
BATCH = 256
"""Points per upsert: a few hundred, so that a batch of 1024-dim points is about 1 MB in flight."""


@dataclass(frozen=True)
class ImportResult:
    collection: str
    export_id: str
    points: int
    """Points the file held (checked against its trailer)."""
    stored: int
    """Points the collection holds now."""
    created: bool
    resumed: bool
    quantization: str | None = None
    """The quantization the collection records now (the export's, where this store records one)."""


@dataclass
class Importer:
    """Imports into ``store`` for a service that embeds queries with ``model``. One import per collection at a
    time in this process (a second answers 409 ``import_in_progress``)."""

    store: VectorStore
    model: EmbeddingModel
    active: set[str] = field(default_factory=set)

    async def run(self, name: str, body: AsyncIterator[bytes], *, batch: int = BATCH) -> ImportResult:
        if name in self.active:
            raise ImportConflict(f"an import into {name!r} is already running", code="import_in_progress",
                                 param="name")
        self.active.add(name)
        try:
            return await self._run(name, body, batch)
        finally:
            self.active.discard(name)

    async def _run(self, name: str, body: AsyncIterator[bytes], batch: int) -> ImportResult:
        reader = ExportReader()
        pending: list[ImportPoint] = []
        header: ExportHeader | None = None
        created = resumed = False
        try:
            async for piece in body:
                for item in reader.feed(piece):
                    if isinstance(item, ExportHeader):
                        header = item
                        created, resumed = await self._prepare(name, header)
                        continue
                    pending.append(item)
                    if len(pending) >= batch:
                        await self._write(name, pending)
                        pending = []
            points = reader.finish()
            await self._write(name, pending)
        except InvalidExport:
            if created:
                log.warning("import into %r refused: the file is damaged; deleting the collection it created", name)
                await self.store.delete_collection(name)
            raise
        assert header is not None
        if header.quantization is not None:
            await self._quantize(name, header.quantization)  # before the mark goes: a crash between resumes both
        info = await self.store.set_importing(name, None)
        stored = await self.store.count(name)
        return ImportResult(name, header.export_id, points, stored, created, resumed, info.quantization)

    async def _prepare(self, name: str, header: ExportHeader) -> tuple[bool, bool]:
        """Check the header against this service and the target; create or mark the target. (created, resumed)"""
        if header.model != self.model.name:
            raise ImportConflict(
                f"the export's vectors come from {header.model!r}, and this service embeds queries with "
                f"{self.model.name!r}: its searches would compare vectors of two models", code="model_mismatch",
                param="model")
        try:
            self.model.check_dimensions(header.dimensions)
        except ValueError as exc:
            raise ImportConflict(f"the export cannot be searched here: {exc}", code="dimension_mismatch",
                                 param="dimensions") from exc
        self.store.check_writable()
        try:
            existing = await self.store.get_collection(name)
        except CollectionNotFound:
            existing = None
        if existing is None:
            await self.store.create_collection(name, dimensions=header.dimensions, model=header.model,
                                               filter_fields=dict(header.filter_fields), sparse=header.sparse)
            created, resumed = True, False
        else:
            _check_target(existing, header)
            resumed = existing.importing == header.export_id
            created = False
        await self.store.set_importing(name, header.export_id)
        if header.sparse is not None:
            await self.store.set_sparse_settings(name, header.sparse, header.sparse_stats or SparseStats())
        return created, resumed

    async def _quantize(self, name: str, quantization: str) -> None:
        """Record the export's quantization on the target, where its backend records that one."""
        if quantization in self.store.quantizations:
            await self.store.set_quantization(name, quantization)
            return
        log.warning("import into %r: the export's %s quantization is not carried over (the %s store does not "
                    "record one); its points are stored and searched unquantized", name, quantization,
                    self.store.backend)

    async def _write(self, name: str, points: list[ImportPoint]) -> None:
        """Upsert a batch in one store write, each point with its sparse vector or without one."""
        if points:
            await self.store.upsert(name, [p.chunk for p in points], np.stack([p.dense for p in points]),
                                    [p.sparse for p in points])


def _check_target(existing: CollectionInfo, header: ExportHeader) -> None:
    name = existing.name
    if existing.model != header.model:
        raise ImportConflict(f"collection {name!r} holds vectors of {existing.model!r}, the export {header.model!r}",
                             code="model_mismatch", param="model")
    if existing.dimensions != header.dimensions:
        raise ImportConflict(f"collection {name!r} has {existing.dimensions} dimensions, the export "
                             f"{header.dimensions}", code="dimension_mismatch", param="dimensions")
    if _dump(existing.sparse) != _dump(header.sparse):
        raise ImportConflict(f"collection {name!r} has other BM25 settings than the export ({_dump(existing.sparse)} "
                             f"vs {_dump(header.sparse)}): its sparse vectors would not match its queries",
                             code="sparse_settings_mismatch", param="sparse")
    if existing.filter_fields != header.filter_fields:
        raise ImportConflict(f"collection {name!r} has other filter fields than the export "
                             f"({existing.filter_fields} vs {header.filter_fields})", code="filter_fields_mismatch",
                             param="filter_fields")
    if existing.importing is not None and existing.importing != header.export_id:
        raise CollectionImporting(name, existing.importing)
    if existing.importing is None and existing.points:
        raise ImportConflict(f"collection {name!r} already holds {existing.points} points: import into a new or "
                             "an empty collection", code="collection_not_empty", param="name")


def _dump(sparse: object) -> object:
    return None if sparse is None else sparse.model_dump()  # type: ignore[attr-defined]
