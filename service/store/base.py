"""The store interface: what the search service, the documents writer and the indexer ask of Qdrant.

Three backends implement it: :class:`service.store.edge.EdgeStore` (Qdrant Edge, the embedded default, in the
process that owns the data folder), :class:`service.store.proxy.ProcessStore` (that store seen from the API's
processes, over a pipe to its owner) and :class:`service.store.qdrant_server.ServerStore` (a Qdrant server or
cluster over ``AsyncQdrantClient``). All hold the same points and answer the same queries; ``tests/service/store``
runs one contract suite over the three.

A document is complete in the store when it holds exactly the chunks ``0..chunk_count-1``, all with the same
``content_hash``. :meth:`VectorStore.replace_documents` writes the new chunks first and then deletes the
document's chunks of any other hash, so a crash between the two leaves at worst stale extra chunks that the
next run removes, never a document that looks complete but is not.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

from service.sparse.config import SparseConfig, SparseStats
from service.store.snapshots import SnapshotError, SnapshotInfo
from service.store.ties import settled
from service.store.types import (
    Chunk,
    CollectionInfo,
    DocState,
    Filter,
    Fusion,
    HasId,
    Hit,
    MatchAny,
    ModeScores,
    SparseVector,
    StoredPoint,
    both,
    doc_filter,
    stale_versions,
)


class VectorStore(ABC):
    """Collections of chunks. Every method may raise :class:`service.store.errors.StoreError` (503),
    :class:`~service.store.errors.StoreTimeout` (504) or :class:`~service.store.errors.CollectionNotFound`."""

    backend: str
    quantizations: frozenset[str] = frozenset()
    """The dense-vector quantizations :meth:`set_quantization` records on this backend (none by default)."""
    _settings_locks: dict[str, asyncio.Lock]

    def settings_lock(self, name: str) -> asyncio.Lock:
        """Serialises read-modify-write of a collection's settings within this process."""
        locks = self.__dict__.setdefault("_settings_locks", {})
        return locks.setdefault(name, asyncio.Lock())

    @abstractmethod
    async def aclose(self) -> None: ...

    async def flush(self) -> None:
        """Make every acknowledged write durable now (a no-op where the engine already did)."""
        return None

    @abstractmethod
    async def ping(self) -> bool: ...

    async def snapshot(self, name: str | None, dest: Path) -> SnapshotInfo:
        """A consistent copy of one collection (``name``) or of all of them, as the snapshot folder ``dest``
        (:mod:`service.store.snapshots`), taken while the store serves: searches go on, writes wait for it."""
        raise SnapshotError(f"the {self.backend} store cannot take snapshots", code="snapshot_unsupported")

    def check_writable(self, need_bytes: int = 0) -> None:
        """Raise :class:`~service.store.errors.StoreFull` when a write of about ``need_bytes`` cannot be taken
        now (the embedded store's data disk is below its reserve), so callers refuse before doing any work.
        A Qdrant server guards its own disk: there, always writable."""
        return None

    @abstractmethod
    async def create_collection(
        self, name: str, *, dimensions: int, model: str, filter_fields: dict[str, str] | None = None,
        sparse: SparseConfig | None = None,
    ) -> CollectionInfo: ...

    @abstractmethod
    async def list_collections(self) -> list[CollectionInfo]:
        """Every collection with its settings and point count, without a call per collection."""

    @abstractmethod
    async def describe(self, name: str) -> CollectionInfo:
        """A collection's settings for the query and write paths: cached, no count (``points`` as cached)."""

    @abstractmethod
    async def get_collection(self, name: str) -> CollectionInfo:
        """A collection's settings and its exact point count."""

    @abstractmethod
    async def delete_collection(self, name: str) -> None: ...

    @abstractmethod
    async def upsert(
        self, name: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
        sparse: Sequence[SparseVector | None] | None = None,
    ) -> None:
        """Store the chunks with their dense vectors, in one write: ``sparse`` gives each point its sparse
        vector, or None for a point stored without one (a batch may mix both); None for the whole batch stores
        none."""

    @abstractmethod
    async def delete(self, name: str, where: Filter) -> None:
        """Delete every point matching ``where``."""

    @abstractmethod
    async def scroll_states(self, name: str, where: Filter | None) -> dict[str, DocState]:
        """Fold the (doc_id, chunk_index, hash, count) payload of every matching point into states."""

    async def query(
        self, name: str, *, dense: Sequence[float] | None = None, sparse: SparseVector | None = None,
        limit: int, query_filter: Filter | None = None, fusion: Fusion | None = None,
        idf_corpus: Filter | None = None,
    ) -> list[Hit]:
        """Dense, sparse, or both fused (prefetches + fusion when both are given), the best ``limit`` hits by
        score, tied scores by point id (:mod:`service.store.ties`): the same query answers the same list on every
        call and on every copy of the collection. Usually one engine call; a tie at the cut can take more.
        ``idf_corpus`` restricts the points BM25's document frequencies are counted over (a tenant's)."""
        if dense is not None and sparse is not None:
            # Each list is fused from the depth ``limit`` gives, not the larger fetch: deeper lists would add
            # candidates and change the fused scores.
            fusion = fusion or Fusion()
            fusion = replace(fusion, prefetch_limit=max(limit, fusion.prefetch_limit))
        return await settled(lambda n: self.engine_query(name, dense=dense, sparse=sparse, limit=n,
                                                         query_filter=query_filter, fusion=fusion,
                                                         idf_corpus=idf_corpus), limit)

    @abstractmethod
    async def engine_query(
        self, name: str, *, dense: Sequence[float] | None = None, sparse: SparseVector | None = None,
        limit: int, query_filter: Filter | None = None, fusion: Fusion | None = None,
        idf_corpus: Filter | None = None,
    ) -> list[Hit]:
        """One engine call for :meth:`query`: the engine's best ``limit`` hits, tied scores in its own order. A
        fused query prefetches exactly ``fusion.prefetch_limit`` per list, which may be fewer than ``limit``."""

    @abstractmethod
    async def read_chunks(self, name: str, where: Filter, *, limit: int) -> list[Hit]:
        """The points matching ``where`` (at most ``limit``, in no given order) as hits scored 0, in one engine
        call: the context assembler reads a request's neighbouring chunks by their point ids with it, under the
        reading key's scope."""

    @abstractmethod
    async def ensure_tenant_index(self, name: str, field: str) -> None:
        """Make sure ``metadata.<field>`` has an ``is_tenant`` keyword index and the internal ``tenant``
        field a keyword index (idempotent; collections created before a tenant key existed get them here)."""

    @abstractmethod
    async def count(self, name: str, where: Filter | None = None) -> int: ...

    @abstractmethod
    async def set_sparse_settings(self, name: str, sparse: SparseConfig, stats: SparseStats) -> CollectionInfo:
        """Store a collection's BM25 settings and length statistics (its other settings stay)."""

    @abstractmethod
    def scroll_texts(self, name: str, page_size: int = 512) -> AsyncIterator[list[tuple[str, str]]]:
        """Every point's (id, text), a page at a time."""

    @abstractmethod
    def export_points(self, name: str, page_size: int = 256) -> AsyncIterator[list[StoredPoint]]:
        """Every point with its whole payload and both vectors, a page at a time, in id order (a scroll: not a
        snapshot; a write during it may or may not be seen)."""

    @abstractmethod
    async def set_importing(self, name: str, export_id: str | None) -> CollectionInfo:
        """Mark the collection as holding an import under way (``export_id``), or clear the mark (None); its
        other settings stay."""

    async def set_quantization(self, name: str, quantization: str) -> CollectionInfo:
        """Record that the collection's dense vectors are searched ``quantization``-quantized (one of
        :attr:`quantizations`); its other settings stay. What it takes to build the quantized copy is the
        backend's (the embedded store: the next ``ragserve optimize``, with the store closed)."""
        raise ValueError(f"the {self.backend} store does not record a quantization ({quantization!r})")

    async def build_index(self, name: str) -> CollectionInfo:
        """Start building the collection's index now, in the background, and describe it (its ``index`` says a
        build runs). A Qdrant server indexes on its own: there, the description only."""
        return await self.get_collection(name)

    @abstractmethod
    async def set_sparse_vectors(self, name: str, vectors: Sequence[tuple[str, SparseVector]]) -> None:
        """Replace the sparse vector of existing points (their dense vector and payload stay)."""

    # --- built on the primitives above, the same for every backend ------------------------------------

    # ``scope`` (``service.store.tenancy.write_scope``) restricts a document operation to one tenant's chunks;
    # None reaches every chunk of the collection.

    async def replace_documents(
        self, name: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
        sparse: Sequence[SparseVector | None] | None = None, *, scope: Filter | None = None,
    ) -> None:
        """Upsert the chunks of whole documents, then drop those documents' chunks of other versions."""
        await self.upsert(name, chunks, vectors, sparse)
        stale = both(stale_versions([c.doc_id for c in chunks], [c.id_in(name) for c in chunks]), scope)
        assert stale is not None
        await self.delete(name, stale)

    async def delete_documents(self, name: str, doc_ids: Sequence[str], *, scope: Filter | None = None) -> None:
        if doc_ids:
            where = both(Filter(must=(MatchAny("doc_id", tuple(doc_ids)),)), scope)
            assert where is not None
            await self.delete(name, where)

    async def delete_source(self, name: str, source: str, *, scope: Filter | None = None) -> None:
        """Delete every document indexed from one source."""
        where = both(doc_filter(source=source), scope)
        assert where is not None
        await self.delete(name, where)

    async def doc_states(self, name: str, *, source: str | None = None, doc_ids: Sequence[str] | None = None,
                         scope: Filter | None = None) -> dict[str, DocState]:
        """Hash and chunk indices of every stored document (of one source, or of the given ids)."""
        if doc_ids is not None and not doc_ids:
            return {}
        return await self.scroll_states(
            name, both(doc_filter(source=source, doc_ids=list(doc_ids) if doc_ids is not None else None), scope)
        )

    async def mode_scores(
        self, name: str, ids: Sequence[str], *, dense: Sequence[float], sparse: SparseVector,
        idf_corpus: Filter | None = None,
    ) -> dict[str, ModeScores]:
        """The dense and the BM25 score of the points ``ids`` (a fused query's hits), each as a dense-only and
        a sparse-only query would score it: the engine fuses inside one call and returns only the fused score,
        so this asks it twice more, restricted to those points. ``idf_corpus`` must be the fused query's, so that
        BM25 counts document frequencies over the same points (a filter on the query does not change them, the
        corpus does). A point the BM25 query does not match (no term in common) is not returned by the engine:
        its ``bm25`` is None, not 0."""
        if not ids:
            return {}
        only = Filter(must=(HasId(tuple(ids)),))
        dense_hits, sparse_hits = await asyncio.gather(
            self.query(name, dense=dense, limit=len(ids), query_filter=only),
            self.query(name, sparse=sparse, limit=len(ids), query_filter=only, idf_corpus=idf_corpus),
        )
        cosine = {h.id: h.score for h in dense_hits}
        bm25 = {h.id: h.score for h in sparse_hits}
        return {i: ModeScores(dense=cosine.get(i), bm25=bm25.get(i)) for i in ids}

    async def search(self, name: str, vector: Sequence[float], *, limit: int,
                     query_filter: Filter | None = None) -> list[Hit]:
        return await self.query(name, dense=vector, limit=limit, query_filter=query_filter)


def check_vectors(chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
                  sparse: Sequence[SparseVector | None] | None) -> None:
    if len(chunks) != len(vectors) or (sparse is not None and len(sparse) != len(chunks)):
        raise ValueError("one vector per chunk")
