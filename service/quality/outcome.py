"""What one collection's search found, as the search pipeline reports it to the quality series."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchOutcome:
    """What one collection's search found, for the quality series (:mod:`service.quality.metrics`)."""

    collection: str
    mode: str
    restricted: bool
    """A filter or the key's tenant narrowed the search."""
    hits: int
    top_score: float | None
    """The engine's top score, before any rerank; None without hits."""
    reranked: bool = False
    rerank_top_score: float | None = None
    rerank_changed: bool = False
    """The reranker put another hit first."""
