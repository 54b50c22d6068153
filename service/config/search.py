"""``RAGSERVE_SEARCH__*``: fusion defaults."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SearchSettings(BaseModel):
    """Hybrid search defaults: RRF with k and weights chosen by ``ragserve tune-fusion`` on SciFact's *train*
    split only (docs/retrieval-quality.md); re-tune on your own data."""

    fusion: Literal["rrf", "dbsf"] = Field("rrf", description="Hybrid fusion when a request names none.")
    prefetch_limit: int = Field(100, description="Candidates each of dense and sparse contributes to fusion.")
    rrf_k: int = Field(2, description="RRF rank constant (Qdrant's default is 2; the literature's 60).")
    dense_weight: float = Field(1.0, description="RRF weight of the dense candidates.")
    sparse_weight: float = Field(1.5, description="RRF weight of the sparse (BM25) candidates.")
