"""A Qdrant server or cluster, over ``AsyncQdrantClient`` (public API only).

In tests the same code runs on qdrant-client's local mode (``AsyncQdrantClient(location=":memory:")`` or
``path=``), a pure-Python stand-in for the server: no Qdrant server can be installed where the tests run.
Local mode is not a product backend.

Collection settings are cached for ``metadata_ttl_s``: several API replicas share one server, so a change
made by another replica is seen within the TTL; this process's own creates and deletes invalidate at once.
The TTL runs on ``clock`` (``time.monotonic`` unless a test passes one it steps).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import httpx
from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from service.deadline import Deadline, within
from service.sparse.config import SparseConfig, SparseStats
from service.store import qdrant_server_snapshots
from service.store.base import VectorStore, check_vectors
from service.store.errors import CollectionExists, CollectionNotFound, StoreError, StoreTimeout
from service.store.qdrant_snapshots import SnapshotApi
from service.store.qdrant_status import status_error
from service.store.snapshots import SnapshotError, SnapshotInfo
from service.store.types import (
    DENSE,
    INTERNAL_INDEXES,
    SPARSE,
    TENANT,
    Chunk,
    CollectionInfo,
    DocState,
    Filter,
    Fusion,
    HasId,
    Hit,
    IsEmpty,
    Match,
    MatchAny,
    Range,
    SparseVector,
    StateCollector,
    StoredPoint,
    dense_floats,
)

T = TypeVar("T")
FIELD_TYPES: dict[str, models.PayloadSchemaType] = {
    "keyword": models.PayloadSchemaType.KEYWORD,
    "integer": models.PayloadSchemaType.INTEGER,
    "float": models.PayloadSchemaType.FLOAT,
    "bool": models.PayloadSchemaType.BOOL,
    "datetime": models.PayloadSchemaType.DATETIME,
    "text": models.PayloadSchemaType.TEXT,
}


class ServerStore(VectorStore):
    backend = "server"

    def __init__(self, client: AsyncQdrantClient, *, max_concurrency: int = 8, timeout_s: float = 10.0,
                 topology: dict[str, int | None] | None = None, metadata_ttl_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, snapshot_api: SnapshotApi | None = None):
        self.client = client
        self.snapshot_api = snapshot_api
        """The server's snapshot endpoints over REST; None (qdrant-client's local mode): no snapshots."""
        self._topology = {k: v for k, v in (topology or {}).items() if v is not None}
        """shard_number / replication_factor / write_consistency_factor for new collections (a server)."""
        self._slots = asyncio.Semaphore(max_concurrency)
        self._timeout_s = timeout_s
        self._ttl_s = metadata_ttl_s
        self._clock = clock
        self._described: dict[str, tuple[float, CollectionInfo]] = {}
        self._tenant_indexes: set[tuple[str, str]] = set()

    async def aclose(self) -> None:
        try:
            await self.client.close()
        finally:
            if self.snapshot_api is not None:
                await self.snapshot_api.aclose()

    async def _call(self, op: Callable[[], Awaitable[T]], collection: str | None = None) -> T:
        """Run one client call under the concurrency bound and one deadline (``timeout_s``), translating its
        errors; a connection that could not be made is retried inside the deadline (nothing was sent)."""
        deadline = Deadline(self._timeout_s)
        async with self._slots:
            attempt = 0
            while True:
                try:
                    return await within(op(), deadline.remaining())
                except asyncio.TimeoutError as exc:
                    raise StoreTimeout(f"Qdrant did not answer within {self._timeout_s:g}s") from exc
                except UnexpectedResponse as exc:
                    if exc.status_code == 404 and collection is not None:
                        self._described.pop(collection, None)
                        raise CollectionNotFound(collection) from exc
                    raise status_error(exc) from exc
                except ResponseHandlingException as exc:
                    cause = exc.args[0] if exc.args else None
                    if isinstance(cause, httpx.ConnectError | httpx.ConnectTimeout):
                        delay = min(0.1 * 2**attempt, 1.0)
                        if deadline.allows(delay):
                            await asyncio.sleep(delay)
                            attempt += 1
                            continue
                        raise StoreError(f"Qdrant is unreachable ({type(cause).__name__})") from exc
                    if isinstance(cause, httpx.TimeoutException):
                        raise StoreTimeout(f"Qdrant did not answer within {self._timeout_s:g}s") from exc
                    if isinstance(cause, httpx.TransportError):
                        raise StoreError(f"the connection to Qdrant was lost ({type(cause).__name__})") from exc
                    raise StoreError("Qdrant answered something ragserve cannot read") from exc
                except ValueError as exc:  # local mode: "Collection X not found"
                    if collection is not None and "not found" in str(exc):
                        self._described.pop(collection, None)
                        raise CollectionNotFound(collection) from exc
                    raise

    async def ping(self) -> bool:
        try:
            await self._call(self.client.get_collections)
        except StoreError:
            return False
        return True

    async def snapshot(self, name: str | None, dest: Path) -> SnapshotInfo:
        """Qdrant's snapshot of each collection, downloaded into ``dest`` and deleted from the server
        (:mod:`service.store.qdrant_server_snapshots`): searches and writes go on."""
        if self.snapshot_api is None:
            raise SnapshotError("this Qdrant client (local mode) cannot take snapshots", code="snapshot_unsupported")
        return await qdrant_server_snapshots.take(self, self.snapshot_api, name, dest)

    async def create_collection(
        self, name: str, *, dimensions: int, model: str, filter_fields: dict[str, str] | None = None,
        sparse: SparseConfig | None = None,
    ) -> CollectionInfo:
        if await self._call(lambda: self.client.collection_exists(name)):
            raise CollectionExists(name)
        info = CollectionInfo(name, dimensions, 0, model, dict(filter_fields or {}), sparse)
        await self._call(
            lambda: self.client.create_collection(
                name,
                vectors_config={DENSE: models.VectorParams(size=dimensions, distance=models.Distance.COSINE)},
                sparse_vectors_config=(
                    {SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)} if sparse else None
                ),
                metadata=info.metadata(),
                **self._topology,
            )
        )
        indexes = {**INTERNAL_INDEXES, **{f"metadata.{k}": v for k, v in info.filter_fields.items()}}
        for key, kind in indexes.items():
            await self._call(
                lambda key=key, kind=kind: self.client.create_payload_index(name, key, FIELD_TYPES[kind]),
                name,
            )
        self._described[name] = (self._clock(), info)
        return info

    async def list_collections(self) -> list[CollectionInfo]:
        response = await self._call(self.client.get_collections)
        names = sorted(c.name for c in response.collections)
        return list(await asyncio.gather(*(self.describe(n) for n in names)))

    async def describe(self, name: str) -> CollectionInfo:
        cached = self._described.get(name)
        if cached is not None and self._clock() - cached[0] < self._ttl_s:
            return cached[1]
        info = await self._call(lambda: self.client.get_collection(name), name)
        vectors = info.config.params.vectors
        if not isinstance(vectors, dict) or DENSE not in vectors:
            raise StoreError(f"collection {name!r} was not created by ragserve (no {DENSE!r} vector)")
        described = CollectionInfo.from_metadata(
            name, vectors[DENSE].size, info.points_count or 0, info.config.metadata or {}
        )
        self._described[name] = (self._clock(), described)
        return described

    async def get_collection(self, name: str) -> CollectionInfo:
        self._described.pop(name, None)
        info = await self.describe(name)
        return replace(info, points=await self.count(name))

    async def delete_collection(self, name: str) -> None:
        if not await self._call(lambda: self.client.collection_exists(name)):
            raise CollectionNotFound(name)
        self._described.pop(name, None)
        self._tenant_indexes = {k for k in self._tenant_indexes if k[0] != name}
        await self._call(lambda: self.client.delete_collection(name), name)

    async def upsert(
        self, name: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
        sparse: Sequence[SparseVector | None] | None = None,
    ) -> None:
        check_vectors(chunks, vectors, sparse)
        points = [
            models.PointStruct(id=c.id_in(name), vector=_vectors(v, sparse[i] if sparse is not None else None),
                               payload=c.payload())
            for i, (c, v) in enumerate(zip(chunks, vectors, strict=True))
        ]
        await self._call(lambda: self.client.upsert(name, points=points, wait=True), name)

    async def delete(self, name: str, where: Filter) -> None:
        selector = models.FilterSelector(filter=to_qdrant(where))
        await self._call(lambda: self.client.delete(name, points_selector=selector, wait=True), name)

    async def scroll_states(self, name: str, where: Filter | None, page_size: int = 2048) -> dict[str, DocState]:
        flt = to_qdrant(where) if where is not None else None
        states = StateCollector()
        offset: Any = None
        while True:
            points, offset = await self._call(
                lambda offset=offset: self.client.scroll(
                    name, scroll_filter=flt, limit=page_size, offset=offset, with_payload=StateCollector.FIELDS,
                    with_vectors=False,
                ),
                name,
            )
            for p in points:
                states.add(p.payload)
            if offset is None:
                return states.states()

    async def read_chunks(self, name: str, where: Filter, *, limit: int) -> list[Hit]:
        flt = to_qdrant(where)
        points, _ = await self._call(
            lambda: self.client.scroll(name, scroll_filter=flt, limit=limit, with_payload=True, with_vectors=False),
            name,
        )
        return [Hit.from_payload(p.id, 0.0, p.payload) for p in points]

    async def engine_query(
        self, name: str, *, dense: Sequence[float] | None = None, sparse: SparseVector | None = None,
        limit: int, query_filter: Filter | None = None, fusion: Fusion | None = None,
        idf_corpus: Filter | None = None,
    ) -> list[Hit]:
        flt = to_qdrant(query_filter) if query_filter is not None else None
        # A tenant's BM25 counts document frequencies over its own points only.
        idf = None if idf_corpus is None else models.SearchParams(
            idf=models.IdfCorpusParams(corpus=to_qdrant(idf_corpus)))
        kwargs: dict[str, Any]
        if dense is not None and sparse is not None:
            fusion = fusion or Fusion()
            prefetch_limit = fusion.prefetch_limit  # :meth:`VectorStore.query` sets it from its limit
            kwargs = {
                "prefetch": [
                    models.Prefetch(query=list(dense), using=DENSE, limit=prefetch_limit, filter=flt),
                    models.Prefetch(query=_sparse(sparse), using=SPARSE, limit=prefetch_limit, filter=flt,
                                    params=idf),
                ],
                "query": _fusion(fusion),
            }
        elif dense is not None:
            kwargs = {"query": list(dense), "using": DENSE}
        elif sparse is not None:
            kwargs = {"query": _sparse(sparse), "using": SPARSE, "search_params": idf}
        else:
            raise ValueError("a dense or a sparse query vector is needed")
        response = await self._call(
            lambda: self.client.query_points(name, limit=limit, query_filter=flt, with_payload=True, **kwargs),
            name,
        )
        return [Hit.from_payload(p.id, p.score, p.payload) for p in response.points]

    async def ensure_tenant_index(self, name: str, field: str) -> None:
        if (name, field) in self._tenant_indexes:
            return
        tenant_index = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
        await self._call(lambda: self.client.create_payload_index(name, f"metadata.{field}", tenant_index), name)
        await self._call(lambda: self.client.create_payload_index(name, TENANT, FIELD_TYPES["keyword"]), name)
        self._tenant_indexes.add((name, field))

    async def count(self, name: str, where: Filter | None = None) -> int:
        flt = to_qdrant(where) if where is not None else None
        result = await self._call(lambda: self.client.count(name, count_filter=flt, exact=True), name)
        return int(result.count)

    async def set_sparse_settings(self, name: str, sparse: SparseConfig, stats: SparseStats) -> CollectionInfo:
        info = replace(await self.describe(name), sparse=sparse, sparse_stats=stats)
        await self._call(lambda: self.client.update_collection(name, metadata=info.metadata()), name)
        self._described[name] = (self._clock(), info)
        return info

    async def scroll_texts(self, name: str, page_size: int = 512) -> AsyncIterator[list[tuple[str, str]]]:
        offset: Any = None
        while True:
            points, offset = await self._call(
                lambda offset=offset: self.client.scroll(name, limit=page_size, offset=offset, with_payload=["text"],
                                                         with_vectors=False),
                name,
            )
            yield [(str(p.id), str((p.payload or {}).get("text", ""))) for p in points]
            if offset is None:
                return

    async def export_points(self, name: str, page_size: int = 256) -> AsyncIterator[list[StoredPoint]]:
        offset: Any = None
        while True:
            points, offset = await self._call(
                lambda offset=offset: self.client.scroll(name, limit=page_size, offset=offset, with_payload=True,
                                                         with_vectors=True),
                name,
            )
            yield [_stored(p) for p in points]
            if offset is None:
                return

    async def set_importing(self, name: str, export_id: str | None) -> CollectionInfo:
        self._described.pop(name, None)  # another replica may have changed it: start from what the server holds
        info = replace(await self.describe(name), importing=export_id)
        await self._call(lambda: self.client.update_collection(name, metadata=info.metadata()), name)
        self._described[name] = (self._clock(), info)
        return info

    async def set_sparse_vectors(self, name: str, vectors: Sequence[tuple[str, SparseVector]]) -> None:
        points = [models.PointVectors(id=pid, vector={SPARSE: _sparse(v)}) for pid, v in vectors]
        await self._call(lambda: self.client.update_vectors(name, points=points, wait=True), name)


def _stored(point: models.Record) -> StoredPoint:
    vectors = point.vector if isinstance(point.vector, dict) else {}
    sparse = vectors.get(SPARSE)
    dense = vectors.get(DENSE)
    if not isinstance(dense, list):
        raise StoreError(f"point {point.id} has no dense vector {DENSE!r}")
    return StoredPoint(str(point.id), dict(point.payload or {}), dense,  # type: ignore[arg-type]
                       SparseVector(list(sparse.indices), list(sparse.values))
                       if isinstance(sparse, models.SparseVector) else None)


def _vectors(dense: Sequence[float], sparse: SparseVector | None) -> dict[str, Any]:
    """A point's named vectors: the dense one, and the sparse one where it has one."""
    vector = dense_floats(dense)
    return {DENSE: vector} if sparse is None else {DENSE: vector, SPARSE: _sparse(sparse)}


def _sparse(v: SparseVector) -> models.SparseVector:
    return models.SparseVector(indices=list(v.indices), values=list(v.values))


def _fusion(fusion: Fusion) -> models.Query:
    if fusion.method == "dbsf":
        return models.FusionQuery(fusion=models.Fusion.DBSF)
    return models.RrfQuery(rrf=models.Rrf(k=fusion.rrf_k, weights=[fusion.dense_weight, fusion.sparse_weight]))


def to_qdrant(flt: Filter) -> models.Filter:
    def cond(c: Any) -> Any:
        if isinstance(c, Filter):
            return to_qdrant(c)
        if isinstance(c, Match):
            return models.FieldCondition(key=c.key, match=models.MatchValue(value=c.value))
        if isinstance(c, MatchAny):
            return models.FieldCondition(key=c.key, match=models.MatchAny(any=list(c.values)))
        if isinstance(c, Range):
            return models.FieldCondition(key=c.key, range=models.Range(gt=c.gt, gte=c.gte, lt=c.lt, lte=c.lte))
        if isinstance(c, IsEmpty):
            return models.IsEmptyCondition(is_empty=models.PayloadField(key=c.key))
        if isinstance(c, HasId):
            return models.HasIdCondition(has_id=list(c.ids))
        raise TypeError(f"not a filter condition: {c!r}")

    return models.Filter(
        must=[cond(c) for c in flt.must] or None,
        must_not=[cond(c) for c in flt.must_not] or None,
        should=[cond(c) for c in flt.should] or None,
    )


def open_client(*, url: str | None, api_key: str | None, timeout_s: float,
                transport: httpx.AsyncBaseTransport | None = None) -> AsyncQdrantClient:
    """``transport`` (tests only) replaces the REST client's network edge, to inject faults."""
    extra: dict[str, Any] = {"transport": transport, "check_compatibility": False} if transport is not None else {}
    return AsyncQdrantClient(url=url, api_key=api_key, timeout=max(1, int(timeout_s)), **extra)
