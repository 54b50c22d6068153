"""What the store holds and answers, independent of the engine behind it.

A point is one chunk: a named dense vector ``dense``, optionally a named sparse vector ``bm25``, and the
payload ``{doc_id, chunk_index, text, metadata, location, source, content_hash, chunk_count, tenant}``. Point
ids are UUIDv5 of ``(collection, doc_id, chunk_index)``, with the tenant before the doc id for a tenant's
chunks (``service.store.tenancy``): upserting the same chunk twice overwrites it, and two tenants' documents
of one id are two documents.

Filters are a small tree (:class:`Filter` of :class:`Match` / :class:`MatchAny` / :class:`Range`) that
each backend translates into its engine's own filter type, so no caller imports an engine's models.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from service.sparse.config import LEGACY_ENCODER, SparseConfig, SparseStats
from service.sparse.vector import SparseVector

__all__ = ["SparseVector"]  # re-exported: a point's sparse vector is part of what the store holds

DENSE = "dense"
SPARSE = "bm25"
POINT_NAMESPACE = uuid.UUID("6f1c7d1e-2b8a-5d0c-9a57-3f1b0e7d4c21")
FIELD_TYPES = ("keyword", "integer", "float", "bool", "datetime", "text")
TENANT = "tenant"
"""Internal payload field: ``field=value`` of the tenant that wrote the chunk; absent for untenanted writes."""
INTERNAL_INDEXES = {"doc_id": "keyword", "source": "keyword", "content_hash": "keyword", TENANT: "keyword"}
"""Payload indexes every collection gets, so replacing or deleting a document is not a scan."""
INT8 = "int8"
"""``CollectionInfo.quantization`` (and ``collection.json``'s ``quantization``) of a collection whose dense vectors
are int8-quantized with no graph (a full scan over the int8 copies): ``ragserve optimize --int8`` quantized it, an
import of an int8 collection recorded it, or ``RAGSERVE_QDRANT__EDGE_QUANTIZATION`` set it at creation."""
HNSW_INT8 = "hnsw-int8"
"""The same for an HNSW graph over the int8 copies (``ragserve optimize --hnsw-int8``, an import, or the setting):
a search walks the graph on int8 distances and rescores its candidates with the float vectors."""
QUANTIZATIONS = frozenset({INT8, HNSW_INT8})
HNSW = "hnsw"
"""What a build of a collection with no quantization makes (an HNSW graph over the float vectors), as the status's
``last_built`` and ``ragserve optimize`` name it."""
NO_QUANTIZATION = "none"
"""``RAGSERVE_QDRANT__EDGE_QUANTIZATION``'s name for no quantization (a collection records it as ``None``)."""


def quantization_named(name: str) -> str | None:
    """The setting's value as a collection records it: :data:`NO_QUANTIZATION` is ``None``."""
    return None if name == NO_QUANTIZATION else name


def point_id(collection: str, doc_id: str, chunk_index: int, tenant: str | None = None) -> str:
    name = f"{collection}\x1f{doc_id}\x1f{chunk_index}"
    if tenant is not None:  # untenanted ids stay what they always were
        name = f"{collection}\x1f{tenant}\x1e{doc_id}\x1f{chunk_index}"
    return str(uuid.uuid5(POINT_NAMESPACE, name))


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
    tenant: str | None = None
    """``field=value`` of the tenant whose chunk this is (its metadata carries the same field and value)."""

    def payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "doc_id": self.doc_id,
            "chunk_index": self.chunk_index,
            "text": self.text,
            "metadata": self.metadata,
            "content_hash": self.content_hash,
            "chunk_count": self.chunk_count,
        }
        if self.source is not None:
            payload["source"] = self.source
        if self.location:
            payload["location"] = self.location
        if self.tenant is not None:
            payload[TENANT] = self.tenant
        return payload

    def id_in(self, collection: str) -> str:
        return point_id(collection, self.doc_id, self.chunk_index, self.tenant)


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
class IndexStatus:
    """A collection's index, as the embedded store's background builds see it (``docs/background-builds.md``)."""

    indexed: int
    """Points whose dense vector is in an indexed (HNSW or int8) segment."""
    unindexed: int
    """Points searched exactly: written since the last build, or below the build threshold."""
    build: str = "idle"
    """``idle``, ``running``, ``failed`` (the last build did not finish: ``reason`` says why) or ``off``."""
    phase: str | None = None
    """While running: ``queued`` (another collection's build runs), ``copying``, ``building``, ``held`` (tests
    only), ``catching up``."""
    reason: str | None = None
    """Why the last build was given up."""
    last_ended: str | None = None
    """When the last build that was swapped in ended (ISO 8601, UTC)."""
    last_built: str | None = None
    """What it built: ``hnsw``, ``int8`` or ``hnsw-int8``."""
    last_points: int | None = None
    """How many points it built the index of (those written during it were caught up after)."""
    last_seconds: float | None = None
    """How long it took, from its start (queued) to its swap."""
    started: str | None = None
    """While running: when the build started (ISO 8601, UTC)."""
    progress: float | None = None
    """While running: the estimated fraction done (``service.store.edge_background.estimate``)."""
    eta_s: float | None = None
    """While running: the estimated seconds left; None while queued behind another build or catching up."""
    waiting_writes: int = 0
    """Writes waiting for the running build's swap: it runs with ``edge_build_max_unindexed`` points unindexed."""


@dataclass(frozen=True)
class CollectionInfo:
    name: str
    dimensions: int
    points: int
    """Stored chunks: exact from :meth:`VectorStore.get_collection`; from a describe, as of its cache."""
    model: str | None
    filter_fields: dict[str, str]
    sparse: SparseConfig | None = None
    """BM25 analysis settings when the collection stores sparse vectors."""
    sparse_stats: SparseStats | None = None
    """Length statistics of the documents written so far (service.documents.normalisation keeps them)."""
    quantization: str | None = None
    """:data:`INT8` or :data:`HNSW_INT8` once the dense vectors are to be int8-quantized (embedded store only):
    its dense searches then oversample and rescore (``RAGSERVE_QDRANT__INT8_OVERSAMPLING``), and every build (in
    the background or ``ragserve optimize``) builds the int8 copy, with a graph over it for ``hnsw-int8``."""
    importing: str | None = None
    """The export id of an import still under way (``service.transfer``): set before its first point is written,
    cleared after its last; a collection that holds it is incomplete (searches answer 409)."""
    index: IndexStatus | None = None
    """Embedded store, from :meth:`~service.store.base.VectorStore.get_collection` only: its index and builds."""

    def metadata(self) -> dict[str, Any]:
        """What is stored beside the collection (the engine keeps dimensions itself)."""
        meta: dict[str, Any] = {"model": self.model, "filter_fields": dict(self.filter_fields)}
        if self.sparse is not None:
            meta["sparse"] = self.sparse.model_dump()
            meta["sparse_stats"] = (self.sparse_stats or SparseStats()).model_dump()
        if self.quantization is not None:
            meta["quantization"] = self.quantization
        meta["importing"] = self.importing  # always: a Qdrant server merges metadata keys, a None clears it
        return meta

    @classmethod
    def from_metadata(cls, name: str, dimensions: int, points: int, meta: dict[str, Any]) -> CollectionInfo:
        sparse = None
        if meta.get("sparse"):  # written before the encoder was recorded: ragserve's own, fixed avg_len
            sparse = SparseConfig(**{"encoder": LEGACY_ENCODER, "avg_len": 256.0, **meta["sparse"]})
        return cls(
            name=name, dimensions=dimensions, points=points, model=meta.get("model"),
            filter_fields=dict(meta.get("filter_fields") or {}), sparse=sparse,
            sparse_stats=SparseStats(**meta["sparse_stats"]) if meta.get("sparse_stats") else None,
            quantization=meta.get("quantization"), importing=meta.get("importing"),
        )


@dataclass(frozen=True)
class StoredPoint:
    """A point as the store holds it, for an export: its id, its whole payload, its dense vector (as stored: the
    engine normalises cosine vectors on write) and its sparse vector (None where it has none)."""

    id: str
    payload: dict[str, Any]
    dense: Sequence[float]
    sparse: SparseVector | None = None


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
    tenant: str | None = None
    """The internal ``tenant`` field of the chunk (``field=value``), None for an untenanted chunk: with ``doc_id``
    and ``chunk_index`` it names the chunk's point id, so a document's other chunks can be read by id."""

    def point_id_of(self, collection: str, chunk_index: int) -> str:
        """The point id of this hit's document's chunk ``chunk_index``."""
        return point_id(collection, self.doc_id, chunk_index, self.tenant)

    @classmethod
    def from_payload(cls, id: object, score: float, payload: dict[str, Any] | None) -> Hit:
        return cls(*hit_row(id, score, payload))


HitRow = tuple[str, float, str, int, str, dict[str, Any], "dict[str, Any] | None", "str | None", "str | None"]
"""A :class:`Hit`'s fields in order, as plain values: what crosses the store process's pipe (a tuple pickles and
unpickles in a third of the time of the dataclass, and ``Hit(*row)`` rebuilds it)."""


def dense_floats(vector: Sequence[float]) -> list[float]:
    """A dense vector as Python floats, what the engines' bindings and JSON take: a list's copy, or a row of the
    indexer's float32 matrix (``EmbeddingClient.embed_matrix``) converted."""
    return vector.tolist() if isinstance(vector, np.ndarray) else list(vector)  # type: ignore[no-any-return]


def hit_row(id: object, score: float, payload: dict[str, Any] | None) -> HitRow:
    """The fields of the hit the engine answered (its point id, score and payload), in :class:`Hit`'s order."""
    payload = payload or {}
    return (str(id), float(score), str(payload.get("doc_id", "")), int(payload.get("chunk_index", 0)),
            str(payload.get("text", "")), dict(payload.get("metadata") or {}), payload.get("location"),
            payload.get("source"), payload.get(TENANT))


@dataclass(frozen=True)
class ModeScores:
    """A fused hit's score in each query that was fused, from the engine: ``dense`` its cosine similarity,
    ``bm25`` its BM25 score, None where that query does not match the point (BM25: no term in common)."""

    dense: float | None
    bm25: float | None


@dataclass(frozen=True)
class Fusion:
    """How dense and sparse candidates are fused: RRF (rank-based; ``k`` and per-list ``weights``) or
    DBSF (distribution-based score normalisation)."""

    method: str = "rrf"
    prefetch_limit: int = 100
    rrf_k: int = 60
    dense_weight: float = 1.0
    sparse_weight: float = 1.0


# --- filters ------------------------------------------------------------------------------------------

Scalar = str | int | bool


@dataclass(frozen=True)
class Match:
    key: str
    value: Scalar


@dataclass(frozen=True)
class MatchAny:
    key: str
    values: tuple[Scalar, ...]


@dataclass(frozen=True)
class Range:
    key: str
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None


@dataclass(frozen=True)
class IsEmpty:
    """The payload field is missing, null or an empty list."""

    key: str


@dataclass(frozen=True)
class HasId:
    """Points with one of these ids."""

    ids: tuple[str, ...]


Condition = Union[Match, MatchAny, Range, IsEmpty, HasId, "Filter"]  # noqa: UP007 - a forward reference


@dataclass(frozen=True)
class Filter:
    """All of ``must``, none of ``must_not``, and at least one of ``should`` (when given)."""

    must: tuple[Condition, ...] = ()
    must_not: tuple[Condition, ...] = ()
    should: tuple[Condition, ...] = ()

    def and_(self, other: Filter | None) -> Filter:
        return self if other is None else Filter(must=(self, other))


def both(a: Filter | None, b: Filter | None) -> Filter | None:
    """Points matching ``a`` and ``b``; either may be None (no condition)."""
    if a is None or b is None:
        return a or b
    return a.and_(b)


def stale_versions(doc_ids: Sequence[str], written: Sequence[str]) -> Filter:
    """Chunks of these documents other than the points just written (their older versions). One
    ``MatchAny`` on the indexed ``doc_id`` and one id set: a sub-filter per document (doc_id and not its
    new content hash) cost the engine about ten times as much (docs/benchmarks.md)."""
    return Filter(must=(MatchAny("doc_id", tuple(dict.fromkeys(doc_ids))),), must_not=(HasId(tuple(written)),))


def doc_filter(*, source: str | None = None, doc_ids: list[str] | None = None) -> Filter | None:
    must: list[Condition] = []
    if source is not None:
        must.append(Match("source", source))
    if doc_ids is not None:
        must.append(MatchAny("doc_id", tuple(doc_ids)))
    return Filter(must=tuple(must)) if must else None


class StateCollector:
    """Folds scrolled ``(doc_id, chunk_index, content_hash, chunk_count)`` payloads into :class:`DocState`."""

    FIELDS = ["doc_id", "chunk_index", "content_hash", "chunk_count"]

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, set[int], int]] = {}
        self._conflicting: set[str] = set()

    def add(self, payload: dict[str, Any] | None) -> None:
        pl = payload or {}
        doc_id, h = str(pl.get("doc_id")), str(pl.get("content_hash", ""))
        entry = self._seen.setdefault(doc_id, (h, set(), int(pl.get("chunk_count", 1))))
        if entry[0] != h:
            self._conflicting.add(doc_id)
        entry[1].add(int(pl.get("chunk_index", 0)))

    def states(self) -> dict[str, DocState]:
        return {
            d: DocState("" if d in self._conflicting else h, frozenset(ix), n)  # mixed versions: never complete
            for d, (h, ix, n) in self._seen.items()
        }
