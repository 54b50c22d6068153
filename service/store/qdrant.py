"""Collections of chunks in Qdrant, over ``AsyncQdrantClient`` only (public API), so the same code runs
on the embedded local mode (``path=``, the zero-setup default) and on a Qdrant server (``url=``).

A point is one chunk: a named dense vector ``dense`` and the payload ``{doc_id, chunk_index, text,
metadata}``. Point ids are UUIDv5 of ``(collection, doc_id, chunk_index)``: upserting the same chunk twice
overwrites it instead of duplicating it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from service.store.errors import CollectionExists, CollectionNotFound, StoreError, StoreTimeout

DENSE = "dense"
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


@dataclass(frozen=True)
class CollectionInfo:
    name: str
    dimensions: int
    points: int
    model: str | None
    filter_fields: dict[str, str]


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    doc_id: str
    chunk_index: int
    text: str
    metadata: dict[str, Any]


class VectorStore:
    def __init__(self, client: AsyncQdrantClient, *, max_concurrency: int = 8, timeout_s: float = 10.0):
        self.client = client
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
        self, name: str, *, dimensions: int, model: str, filter_fields: dict[str, str] | None = None
    ) -> CollectionInfo:
        if await self._call(lambda: self.client.collection_exists(name)):
            raise CollectionExists(name)
        fields = dict(filter_fields or {})
        await self._call(
            lambda: self.client.create_collection(
                name,
                vectors_config={DENSE: models.VectorParams(size=dimensions, distance=models.Distance.COSINE)},
                metadata={"model": model, "filter_fields": fields},
            )
        )
        indexes = {"doc_id": "keyword", **{f"metadata.{k}": v for k, v in fields.items()}}
        for key, kind in indexes.items():
            await self._call(
                lambda key=key, kind=kind: self.client.create_payload_index(name, key, FIELD_TYPES[kind]),
                name,
            )
        return CollectionInfo(name, dimensions, 0, model, fields)

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
        )

    async def delete_collection(self, name: str) -> None:
        if not await self._call(lambda: self.client.collection_exists(name)):
            raise CollectionNotFound(name)
        await self._call(lambda: self.client.delete_collection(name), name)

    async def upsert(self, name: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> None:
        if len(chunks) != len(vectors):
            raise ValueError("one vector per chunk")
        points = [
            models.PointStruct(
                id=point_id(name, c.doc_id, c.chunk_index),
                vector={DENSE: list(v)},
                payload={
                    "doc_id": c.doc_id,
                    "chunk_index": c.chunk_index,
                    "text": c.text,
                    "metadata": c.metadata,
                },
            )
            for c, v in zip(chunks, vectors)
        ]
        await self._call(lambda: self.client.upsert(name, points=points, wait=True), name)

    async def search(
        self, name: str, vector: Sequence[float], *, limit: int, query_filter: models.Filter | None = None
    ) -> list[Hit]:
        response = await self._call(
            lambda: self.client.query_points(
                name,
                query=list(vector),
                using=DENSE,
                limit=limit,
                query_filter=query_filter,
                with_payload=True,
            ),
            name,
        )
        return [_hit(p) for p in response.points]


def _hit(point: models.ScoredPoint) -> Hit:
    payload = point.payload or {}
    return Hit(
        id=str(point.id),
        score=float(point.score),
        doc_id=str(payload.get("doc_id", "")),
        chunk_index=int(payload.get("chunk_index", 0)),
        text=str(payload.get("text", "")),
        metadata=dict(payload.get("metadata") or {}),
    )


def open_client(*, url: str | None, path: str | None, api_key: str | None, timeout_s: float) -> AsyncQdrantClient:
    """A Qdrant server by URL, else the embedded local mode under ``path``."""
    if url:
        return AsyncQdrantClient(url=url, api_key=api_key, timeout=int(timeout_s))
    return AsyncQdrantClient(path=path)
