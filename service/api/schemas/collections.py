from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.sparse.bm25 import SparseConfig

COLLECTION_NAME = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,63}$"
FieldType = Literal["keyword", "integer", "float", "bool", "datetime", "text"]


class CollectionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=COLLECTION_NAME, description="Letters, digits, '_' and '-', up to 64.")
    dimensions: int | None = Field(
        None, ge=1, description="Vector size; default the embedding model's (Matryoshka sizes allowed)."
    )
    filter_fields: dict[str, FieldType] = Field(
        default_factory=dict, description="Metadata fields to index for filtering, with their types."
    )
    sparse: SparseConfig | bool = Field(
        True, description="Store BM25 sparse vectors beside the dense ones (true, false, or analysis settings)."
    )


class CollectionOut(BaseModel):
    name: str
    dimensions: int
    points: int = Field(description="Stored chunks.")
    model: str | None = Field(description="Embedding model the collection was created for.")
    filter_fields: dict[str, str]
    sparse: SparseConfig | None = Field(None, description="BM25 settings, when sparse vectors are stored.")


class CollectionList(BaseModel):
    collections: list[CollectionOut]


class DocumentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=256, description="Your document id; upserting it again replaces it.")
    text: str = Field(min_length=1, description="The (already split) text to embed and store.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Returned with hits; filterable.")
    vector: list[float] | None = Field(
        None, description="A precomputed embedding; must match the collection's dimensions."
    )


class DocumentsUpsert(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: list[DocumentIn] = Field(min_length=1)


class UpsertResult(BaseModel):
    collection: str
    upserted: int
    embedded: int = Field(description="Documents embedded by the runner (the rest came with vectors).")
    timings_ms: dict[str, float]
