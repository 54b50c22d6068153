"""Validate, embed and upsert a batch of already-split text documents.

Everything is checked before anything is written: a request that breaks a limit, or carries a vector
of the wrong size, changes nothing. Embedding happens before the single upsert, so a runner failure
also leaves the collection as it was. A tenant's documents are stamped with its value (replacing whatever
their metadata said) and replace only that tenant's earlier versions (``service.store.tenancy``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.config import Limits
from service.documents.normalisation import SparseNormaliser
from service.documents.replace import replace_chunks
from service.errors import InvalidInput, PayloadTooLarge
from service.store.base import VectorStore
from service.store.tenancy import Tenant, write_scope
from service.store.types import Chunk
from service.upstream.embeddings import EmbeddingClient


@dataclass(frozen=True)
class NewDocument:
    id: str
    text: str
    metadata: dict[str, Any]
    vector: list[float] | None = None


@dataclass(frozen=True)
class WriteResult:
    upserted: int
    embedded: int
    timings_ms: dict[str, float]


def content_hash(text: str, metadata: dict[str, Any], *extra: object) -> str:
    """Identity of a document version: its text, its metadata and whatever shaped its chunks."""
    h = hashlib.sha256()
    for part in (text, json.dumps(metadata, sort_keys=True, ensure_ascii=False), *map(str, extra)):
        h.update(part.encode("utf-8"))
        h.update(b"\x1f")
    return h.hexdigest()[:32]


class DocumentWriter:
    def __init__(self, store: VectorStore, embedder: EmbeddingClient, limits: Limits) -> None:
        self.store = store
        self.embedder = embedder
        self.limits = limits
        self.sparse = SparseNormaliser(store)

    def validate(self, documents: Sequence[NewDocument], dimensions: int) -> None:
        limits = self.limits
        if len(documents) > limits.max_documents_per_request:
            raise PayloadTooLarge(
                f"{len(documents)} documents in one request; the limit is {limits.max_documents_per_request}",
                code="too_many_documents",
                param="documents",
            )
        seen: set[str] = set()
        for i, doc in enumerate(documents):
            where = f"documents[{i}]"
            if doc.id in seen:
                raise InvalidInput(f"{where}: duplicate id {doc.id!r} in one request", code="duplicate_id",
                                   param=f"{where}.id")
            seen.add(doc.id)
            if not doc.text.strip():
                raise InvalidInput(f"{where}: text is empty", code="empty_text", param=f"{where}.text")
            size = len(doc.text.encode("utf-8"))
            if size > limits.max_document_bytes:
                raise PayloadTooLarge(
                    f"{where}: text is {size} bytes; the limit is {limits.max_document_bytes}",
                    code="document_too_large",
                    param=f"{where}.text",
                )
            meta_size = len(json.dumps(doc.metadata, ensure_ascii=False).encode("utf-8"))
            if meta_size > limits.max_metadata_bytes:
                raise PayloadTooLarge(
                    f"{where}: metadata is {meta_size} bytes; the limit is {limits.max_metadata_bytes}",
                    code="metadata_too_large",
                    param=f"{where}.metadata",
                )
            if doc.vector is not None and len(doc.vector) != dimensions:
                raise InvalidInput(
                    f"{where}: vector has {len(doc.vector)} dimensions; the collection needs {dimensions}",
                    code="vector_dimension_mismatch",
                    param=f"{where}.vector",
                )

    async def write(self, collection: str, documents: Sequence[NewDocument], *,
                    tenant: Tenant | None = None) -> WriteResult:
        info = await self.store.describe(collection)
        self.validate(documents, info.dimensions)
        self.store.check_writable()  # a full data disk: 507 before any embedding is spent
        if tenant is not None:
            documents = [NewDocument(d.id, d.text, tenant.stamp(d.metadata), d.vector) for d in documents]
            await self.store.ensure_tenant_index(collection, tenant.field)
        timings: dict[str, float] = {}
        to_embed = [i for i, d in enumerate(documents) if d.vector is None]
        vectors: list[list[float] | None] = [d.vector for d in documents]
        if to_embed:
            try:
                self.embedder.model.check_dimensions(info.dimensions)
            except ValueError as exc:
                raise InvalidInput(
                    f"collection {collection!r}: {exc}; send vectors with the documents",
                    code="dimension_mismatch",
                ) from exc
            t = time.perf_counter()
            embedded = await self.embedder.embed_documents(  # the bulk lane: never in a query's way
                [documents[i].text for i in to_embed], dimensions=info.dimensions, lane="bulk"
            )
            timings["embed"] = round((time.perf_counter() - t) * 1000, 3)
            for i, vector in zip(to_embed, embedded, strict=True):
                vectors[i] = vector
        ns = tenant.namespace if tenant is not None else None
        chunks = [Chunk(d.id, 0, d.text, d.metadata, content_hash=content_hash(d.text, d.metadata), tenant=ns)
                  for d in documents]
        t = time.perf_counter()
        await replace_chunks(self.store, self.sparse, collection, chunks, [v for v in vectors if v is not None],
                             scope=write_scope(tenant))
        timings["upsert"] = round((time.perf_counter() - t) * 1000, 3)
        return WriteResult(upserted=len(documents), embedded=len(to_embed), timings_ms=timings)
