"""Collections of chunks in Qdrant, over ``AsyncQdrantClient`` only (public API), so the same code runs
on the embedded local mode (``path=``, the zero-setup default) and on a Qdrant server (``url=``).

A point is one chunk: a named dense vector ``dense`` and the payload ``{doc_id, chunk_index, text,
metadata, location, source, content_hash, chunk_count}``. Point ids are UUIDv5 of
``(collection, doc_id, chunk_index)``: upserting the same chunk twice overwrites it instead of duplicating it.

A document is complete in the store when it holds exactly the chunks ``0..chunk_count-1``, all with the same
``content_hash``. :meth:`VectorStore.replace_documents` writes the new chunks first and then deletes the
document's chunks of any other hash, so a crash between the two leaves at worst stale extra chunks that the
next run removes, never a document that looks complete but is not.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from service.sparse.bm25 import SparseConfig
from service.store.errors import CollectionExists, CollectionNotFound, StoreError, StoreTimeout

DENSE = "dense"
SPARSE = "bm25"
POINT_NAMESPACE = uuid.UUID("6f1c7d1e-2b8a-5d0c-9a57-3f1b0e7d4c21")
FIELD_TYPES: dict[str, models.PayloadSchemaType] = {
    "keyword": models.PayloadSchemaType.KEYWORD,
    "integer": models.PayloadSchemaType.INTEGER,
    "float": models.PayloadSchemaType.FLOAT,
    "bool": models.PayloadSchemaType.BOOL,
    "datetime": models.PayloadSchemaType.DATETIME,
    "text": models.PayloadSchemaType.TEXT,
}
T = TypeVar("T")


def point_id(collection: str, doc_id: str, chunk_index: int) -> str:
    return str(uuid.uuid5(POINT_NAMESPACE, f"{collection}\x1f{doc_id}\x1f{chunk_index}"))


@dataclass(frozen=True)
class Chunk:
    doc_id: str
    chunk_index: int
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    content_hash: str = ""
    chunk_count: int = 1
    source: str | None = None
    location: dict[str, Any] | None = None
    """Where the chunk sits in its document: char/byte offsets, pages, headings (for citations)."""


@dataclass(frozen=True)
class DocState:
    """What the store holds of one document."""

    content_hash: str
    chunk_indices: frozenset[int]
    chunk_count: int

    @property
    def complete(self) -> bool:
        return self.chunk_indices == frozenset(range(self.chunk_count))


@dataclass(frozen=True)
class CollectionInfo:
    name: str
    dimensions: int
    points: int
    model: str | None
    filter_fields: dict[str, str]
    sparse: SparseConfig | None = None
    """BM25 analysis settings when the collection stores sparse vectors."""


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    doc_id: str
    chunk_index: int
    text: str
    metadata: dict[str, Any]
    location: dict[str, Any] | None = None
    source: str | None = None


class VectorStore:
    def __init__(self, client: AsyncQdrantClient, *, max_concurrency: int = 8, timeout_s: float = 10.0,
                 topology: dict[str, int] | None = None):
        self.client = client
        self._topology = {k: v for k, v in (topology or {}).items() if v is not None}
        """shard_number / replication_factor / write_consistency_factor for new collections (a server)."""
        self._slots = asyncio.Semaphore(max_concurrency)
        self._timeout_s = timeout_s

    async def aclose(self) -> None:
        await self.client.close()

    async def _call(self, op: Callable[[], Awaitable[T]], collection: str | None = None) -> T:
        """Run one client call under the concurrency bound and timeout, translating its errors."""
        async with self._slots:
            try:
                return await asyncio.wait_for(op(), self._timeout_s)
            except asyncio.TimeoutError as exc:
                raise StoreTimeout(f"Qdrant did not answer within {self._timeout_s:g}s") from exc
            except UnexpectedResponse as exc:
                if exc.status_code == 404 and collection is not None:
                    raise CollectionNotFound(collection) from exc
                raise StoreError(f"Qdrant answered {exc.status_code}") from exc
            except ResponseHandlingException as exc:
                raise StoreError("Qdrant is unreachable") from exc
            except ValueError as exc:  # local mode: "Collection X not found"
                if collection is not None and "not found" in str(exc):
                    raise CollectionNotFound(collection) from exc
                raise

    async def ping(self) -> bool:
        try:
            await self._call(self.client.get_collections)
        except StoreError:
            return False
        return True

    async def create_collection(
        self, name: str, *, dimensions: int, model: str, filter_fields: dict[str, str] | None = None,
        sparse: SparseConfig | None = None,
    ) -> CollectionInfo:
        if await self._call(lambda: self.client.collection_exists(name)):
            raise CollectionExists(name)
        fields = dict(filter_fields or {})
        metadata: dict[str, Any] = {"model": model, "filter_fields": fields}
        if sparse is not None:
            metadata["sparse"] = sparse.model_dump()
        await self._call(
            lambda: self.client.create_collection(
                name,
                vectors_config={DENSE: models.VectorParams(size=dimensions, distance=models.Distance.COSINE)},
                sparse_vectors_config=(
                    {SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)} if sparse else None
                ),
                metadata=metadata,
                **self._topology,
            )
        )
        indexes = {"doc_id": "keyword", "source": "keyword", "content_hash": "keyword",
                   **{f"metadata.{k}": v for k, v in fields.items()}}
        for key, kind in indexes.items():
            await self._call(
                lambda key=key, kind=kind: self.client.create_payload_index(name, key, FIELD_TYPES[kind]),
                name,
            )
        return CollectionInfo(name, dimensions, 0, model, fields, sparse)

    async def list_collections(self) -> list[str]:
        response = await self._call(self.client.get_collections)
        return sorted(c.name for c in response.collections)

    async def get_collection(self, name: str) -> CollectionInfo:
        info = await self._call(lambda: self.client.get_collection(name), name)
        vectors = info.config.params.vectors
        if not isinstance(vectors, dict) or DENSE not in vectors:
            raise StoreError(f"collection {name!r} was not created by ragserve (no {DENSE!r} vector)")
        meta = info.config.metadata or {}
        count = await self._call(lambda: self.client.count(name, exact=True), name)
        return CollectionInfo(
            name=name,
            dimensions=vectors[DENSE].size,
            points=count.count,
            model=meta.get("model"),
            filter_fields=dict(meta.get("filter_fields") or {}),
            sparse=SparseConfig(**meta["sparse"]) if meta.get("sparse") else None,
        )

    async def delete_collection(self, name: str) -> None:
        if not await self._call(lambda: self.client.collection_exists(name)):
            raise CollectionNotFound(name)
        await self._call(lambda: self.client.delete_collection(name), name)

    async def upsert(
        self, name: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
        sparse: Sequence[models.SparseVector] | None = None,
    ) -> None:
        if len(chunks) != len(vectors) or (sparse is not None and len(sparse) != len(chunks)):
            raise ValueError("one vector per chunk")
        points = [
            models.PointStruct(
                id=point_id(name, c.doc_id, c.chunk_index),
                vector={DENSE: list(v), SPARSE: sparse[i]} if sparse is not None else {DENSE: list(v)},
                payload=_payload(c),
            )
            for i, (c, v) in enumerate(zip(chunks, vectors, strict=True))
        ]
        await self._call(lambda: self.client.upsert(name, points=points, wait=True), name)

    async def replace_documents(
        self, name: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
        sparse: Sequence[models.SparseVector] | None = None,
    ) -> None:
        """Upsert the chunks of whole documents, then drop those documents' chunks of other versions."""
        await self.upsert(name, chunks, vectors, sparse)
        hashes = {c.doc_id: c.content_hash for c in chunks}
        stale = models.Filter(should=[
            models.Filter(
                must=[models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id))],
                must_not=[models.FieldCondition(key="content_hash", match=models.MatchValue(value=h))],
            )
            for doc_id, h in hashes.items()
        ])
        await self._delete(name, stale)

    async def delete_documents(self, name: str, doc_ids: Sequence[str]) -> None:
        if doc_ids:
            await self._delete(name, models.Filter(must=[
                models.FieldCondition(key="doc_id", match=models.MatchAny(any=list(doc_ids)))
            ]))

    async def _delete(self, name: str, flt: models.Filter) -> None:
        selector = models.FilterSelector(filter=flt)
        await self._call(lambda: self.client.delete(name, points_selector=selector, wait=True), name)

    async def doc_states(self, name: str, *, source: str | None = None, doc_ids: Sequence[str] | None = None,
                         page_size: int = 2048) -> dict[str, DocState]:
        """Hash and chunk indices of every stored document (of one source, or of the given ids)."""
        must: list[models.Condition] = []
        if source is not None:
            must.append(models.FieldCondition(key="source", match=models.MatchValue(value=source)))
        if doc_ids is not None:
            if not doc_ids:
                return {}
            must.append(models.FieldCondition(key="doc_id", match=models.MatchAny(any=list(doc_ids))))
        flt = models.Filter(must=must) if must else None
        fields = ["doc_id", "chunk_index", "content_hash", "chunk_count"]
        seen: dict[str, tuple[str, set[int], int]] = {}
        conflicting: set[str] = set()
        offset: Any = None
        while True:
            points, offset = await self._call(
                lambda offset=offset: self.client.scroll(
                    name, scroll_filter=flt, limit=page_size, offset=offset, with_payload=fields, with_vectors=False
                ),
                name,
            )
            for p in points:
                pl = p.payload or {}
                doc_id, h = str(pl.get("doc_id")), str(pl.get("content_hash", ""))
                entry = seen.setdefault(doc_id, (h, set(), int(pl.get("chunk_count", 1))))
                if entry[0] != h:
                    conflicting.add(doc_id)
                entry[1].add(int(pl.get("chunk_index", 0)))
            if offset is None:
                break
        return {
            d: DocState("" if d in conflicting else h, frozenset(ix), n)  # mixed versions: never "complete"
            for d, (h, ix, n) in seen.items()
        }

    async def search(
        self, name: str, vector: Sequence[float], *, limit: int, query_filter: models.Filter | None = None
    ) -> list[Hit]:
        return await self.query(name, dense=vector, limit=limit, query_filter=query_filter)

    async def query(
        self, name: str, *, dense: Sequence[float] | None = None, sparse: models.SparseVector | None = None,
        limit: int, query_filter: models.Filter | None = None, fusion: Fusion | None = None,
    ) -> list[Hit]:
        """Dense, sparse, or both fused, in one Query API call (prefetches + fusion when both are given)."""
        kwargs: dict[str, Any]
        if dense is not None and sparse is not None:
            fusion = fusion or Fusion()
            prefetch_limit = max(limit, fusion.prefetch_limit)
            kwargs = {
                "prefetch": [
                    models.Prefetch(query=list(dense), using=DENSE, limit=prefetch_limit, filter=query_filter),
                    models.Prefetch(query=sparse, using=SPARSE, limit=prefetch_limit, filter=query_filter),
                ],
                "query": fusion.query(),
            }
        elif dense is not None:
            kwargs = {"query": list(dense), "using": DENSE}
        elif sparse is not None:
            kwargs = {"query": sparse, "using": SPARSE}
        else:
            raise ValueError("a dense or a sparse query vector is needed")
        response = await self._call(
            lambda: self.client.query_points(
                name, limit=limit, query_filter=query_filter, with_payload=True, **kwargs
            ),
            name,
        )
        return [_hit(p) for p in response.points]


@dataclass(frozen=True)
class Fusion:
    """How dense and sparse candidates are fused: RRF (rank-based; ``k`` and per-list ``weights``) or
    DBSF (distribution-based score normalisation)."""

    method: str = "rrf"
    prefetch_limit: int = 100
    rrf_k: int = 60
    dense_weight: float = 1.0
    sparse_weight: float = 1.0

    def query(self) -> models.Query:
        if self.method == "dbsf":
            return models.FusionQuery(fusion=models.Fusion.DBSF)
        return models.RrfQuery(rrf=models.Rrf(k=self.rrf_k, weights=[self.dense_weight, self.sparse_weight]))


def _payload(c: Chunk) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "doc_id": c.doc_id,
        "chunk_index": c.chunk_index,
        "text": c.text,
        "metadata": c.metadata,
        "content_hash": c.content_hash,
        "chunk_count": c.chunk_count,
    }
    if c.source is not None:
        payload["source"] = c.source
    if c.location:
        payload["location"] = c.location
    return payload


def _hit(point: models.ScoredPoint) -> Hit:
    payload = point.payload or {}
    return Hit(
        id=str(point.id),
        score=float(point.score),
        doc_id=str(payload.get("doc_id", "")),
        chunk_index=int(payload.get("chunk_index", 0)),
        text=str(payload.get("text", "")),
        metadata=dict(payload.get("metadata") or {}),
        location=payload.get("location"),
        source=payload.get("source"),
    )


def open_client(*, url: str | None, path: str | None, api_key: str | None, timeout_s: float) -> AsyncQdrantClient:
    """A Qdrant server by URL, else the embedded local mode under ``path``."""
    if url:
        return AsyncQdrantClient(url=url, api_key=api_key, timeout=int(timeout_s))
    return AsyncQdrantClient(path=path)
