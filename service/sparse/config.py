"""BM25 analysis settings of a collection (stored with it, used for its documents and queries)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LEGACY_ENCODER = "ragserve"
"""What a collection stored before the encoder was recorded used: ragserve's own (CRC32 term ids)."""


class SparseConfig(BaseModel):
    """Per-collection analysis settings (stored with the collection, used for documents and queries)."""

    model_config = ConfigDict(extra="forbid")

    encoder: Literal["qdrant", "ragserve"] = Field(
        "qdrant", description="'qdrant': the engine's BM25 tokenizer (qdrant_edge.Bm25, the Qdrant server's "
        "Bm25Config); 'ragserve': ragserve's earlier one (CRC32 term ids), for collections written with it.",
    )
    language: str = Field("english", description="Stemmer and stop-word language.")
    lowercase: bool = True
    stemming: bool = True
    stopwords: bool = Field(True, description="Drop the language's stop-words.")
    k1: float = Field(1.2, ge=0)
    b: float = Field(0.75, ge=0, le=1)
    avg_len: float | None = Field(
        None, gt=0, description="Average document length in terms, for length normalisation. Unset: estimated "
        "from the collection's first documents, kept stable, and re-encoded if the collection's average drifts.",
    )


class SparseStats(BaseModel):
    """Running length statistics of the documents written to a collection (for ``avg_len``)."""

    documents: int = 0
    terms: int = 0
    estimated: bool = Field(False, description="avg_len was estimated from these documents (not configured).")

    @property
    def mean(self) -> float | None:
        return self.terms / self.documents if self.documents else None
