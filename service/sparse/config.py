"""BM25 analysis settings of a collection (stored with it, used for its documents and queries)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SparseConfig(BaseModel):
    """Per-collection analysis settings (stored with the collection, used for documents and queries)."""

    model_config = ConfigDict(extra="forbid")

    language: str = Field("english", description="Snowball stemmer language.")
    lowercase: bool = True
    stemming: bool = True
    stopwords: bool = Field(True, description="Drop English stop-words.")
    k1: float = Field(1.2, ge=0)
    b: float = Field(0.75, ge=0, le=1)
    avg_len: float = Field(256.0, gt=0, description="Typical chunk length in terms, for length normalisation.")
