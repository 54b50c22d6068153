from __future__ import annotations

import base64
import binascii
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.api.schemas.common import DocumentText, FiniteFloat, Identifier, Metadata, RequestModel, refuse
from service.json_types import JsonInt
from service.search.filters import FIELD_RE
from service.sparse.bm25 import SparseConfig
from service.sparse.languages import language_problem

COLLECTION_NAME = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,63}$"
FieldType = Literal["keyword", "integer", "float", "bool", "datetime", "text"]


class SparseOptions(SparseConfig):
    """BM25 settings of a new collection: :class:`SparseConfig` within the ranges its weights stay finite in."""

    model_config = ConfigDict(extra="forbid", strict=True)

    k1: float = Field(1.2, ge=0, le=100, allow_inf_nan=False)
    avg_len: float | None = Field(
        None, ge=0.01, le=1e9, allow_inf_nan=False,
        description="Average document length in terms, for length normalisation. Unset: estimated from the "
        "collection's first documents, kept stable, and re-encoded if the collection's average drifts.",
    )

    @model_validator(mode="after")
    def _language(self) -> SparseOptions:
        if (why := language_problem(self.encoder, self.language)) is not None:
            raise refuse("unsupported_language", why)
        return self


class CollectionCreate(RequestModel):
    name: str = Field(pattern=COLLECTION_NAME, description="Letters, digits, '_' and '-', up to 64.")
    dimensions: JsonInt | None = Field(
        None, ge=1, description="Vector size; default the embedding model's (Matryoshka sizes allowed)."
    )
    filter_fields: dict[Annotated[str, Field(pattern=FIELD_RE.pattern)], FieldType] = Field(
        default_factory=dict, description="Metadata fields to index for filtering, with their types "
        "(names as in filters: a.b for a nested field).",
    )
    sparse: SparseOptions | bool = Field(
        True, description="Store BM25 sparse vectors beside the dense ones (true, false, or analysis settings)."
    )


class IndexStatusOut(BaseModel):
    """The embedded store's index of a collection and its background builds (docs/background-builds.md)."""

    indexed: int = Field(description="Points whose dense vector is in an indexed (HNSW or int8) segment.")
    unindexed: int = Field(description="Points searched exactly: written since the last build, or too few to "
                           "start one (RAGSERVE_QDRANT__EDGE_BUILD_THRESHOLD).")
    build: Literal["idle", "running", "failed", "off"] = Field(
        description="Background builds: idle, running, failed (the last one was given up: see reason) or off.")
    phase: str | None = Field(None, description="While running: queued (behind another collection's build), "
                                             "copying, building or catching up.")
    reason: str | None = Field(None, description="Why the last build was given up.")
    last_ended: str | None = Field(None, description="When the last build swapped in ended (ISO 8601, UTC).")
    last_built: str | None = Field(None, description="What the last build built: hnsw, int8 or hnsw-int8.")
    last_points: int | None = Field(None, description="How many points the last build indexed.")
    last_seconds: float | None = Field(None, description="How long the last build took, start to swap.")
    started: str | None = Field(None, description="While running: when the build started (ISO 8601, UTC).")
    progress: float | None = Field(None, description="While running: the estimated fraction done (0 to 0.99; the "
                                   "engine reports nothing while it builds, so it is timed against the last "
                                   "build's rate: docs/background-builds.md).")
    eta_s: float | None = Field(None, description="While running: the estimated seconds left; null while queued "
                                "or catching up.")
    waiting_writes: int = Field(0, description="Writes waiting for the running build's swap: it runs with "
                                "RAGSERVE_QDRANT__EDGE_BUILD_MAX_UNINDEXED points unindexed, and more would make "
                                "every search's exact scan longer.")


class CollectionOut(BaseModel):
    name: str
    dimensions: int
    points: int = Field(description="Stored chunks.")
    model: str | None = Field(description="Embedding model the collection was created for.")
    filter_fields: dict[str, str]
    sparse: SparseConfig | None = Field(None, description="BM25 settings, when sparse vectors are stored.")
    index: IndexStatusOut | None = Field(
        None, description="Embedded store, when one collection is described: its index and background builds.")


class CollectionList(BaseModel):
    collections: list[CollectionOut]


class DocumentIn(RequestModel):
    id: Identifier = Field(description="Your document id; upserting it again replaces it.")
    text: DocumentText = Field(description="The (already split) text to embed and store.")
    metadata: Metadata = Field(default_factory=dict, description="Returned with hits; filterable.")
    vector: list[FiniteFloat] | None = Field(
        None, json_schema_extra={"contains": {"not": {"const": 0}}},
        description="A precomputed embedding (not all zeros: cosine needs a direction); must match the "
        "collection's dimensions.",
    )

    vector_base64: str | None = Field(
        None, pattern=r"^[A-Za-z0-9+/]*={0,2}$", max_length=1 << 20,
        description="The same embedding as base64 little-endian float32 (what `encoding_format: base64` returns "
        "from `/v1/embeddings`): about 5 times less to send and to parse than a JSON list. At most one of "
        "`vector` and `vector_base64`.",
    )

    @field_validator("vector")
    @classmethod
    def _not_zero(cls, vector: list[float] | None) -> list[float] | None:
        if vector is not None and not any(vector):
            raise refuse("zero_vector", "a vector of zeros has no direction (cosine similarity is undefined)")
        return vector

    @model_validator(mode="after")
    def _decode(self) -> DocumentIn:
        if self.vector_base64 is None:
            return self
        if self.vector is not None:
            raise refuse("invalid_vector", "send the embedding once: `vector` or `vector_base64`, not both")
        try:
            raw = base64.b64decode(self.vector_base64, validate=True)
        except binascii.Error as exc:
            raise refuse("invalid_vector", f"vector_base64 is not base64: {exc}") from exc
        if not raw or len(raw) % 4:
            raise refuse("invalid_vector", f"vector_base64 holds {len(raw)} bytes: not a whole number of float32")
        vector = np.frombuffer(raw, dtype="<f4")
        if not np.isfinite(vector).all():
            raise refuse("invalid_vector", "vector_base64 holds a NaN or an infinity")
        if not vector.any():
            raise refuse("zero_vector", "a vector of zeros has no direction (cosine similarity is undefined)")
        self.vector, self.vector_base64 = vector.tolist(), None
        return self


class DocumentsUpsert(RequestModel):
    documents: list[DocumentIn] = Field(min_length=1)


class UpsertResult(BaseModel):
    collection: str
    upserted: int
    embedded: int = Field(description="Documents embedded by the runner (the rest came with vectors).")
    timings_ms: dict[str, float]
