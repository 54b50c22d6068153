"""``RAGSERVE_CONTEXT__*``: ``/v1/context``'s defaults and limits."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ContextSettings(BaseModel):
    """POST /v1/context: a budgeted, de-duplicated, cited context (service/context/, docs/context.md). The
    defaults were chosen on SciFact's train queries with near-duplicate copies (docs/context.md)."""

    candidates: int = Field(50, ge=1, description="Hits searched for in each collection before packing, when a "
                            "request names none; at most RAGSERVE_LIMITS__MAX_TOP_K.")
    neighbours: int = Field(0, ge=0, description="Chunks before and after each chosen chunk added to it, when a "
                            "request names none.")
    max_neighbours: int = Field(5, ge=0, description="Largest `neighbours` a request may ask for (422 "
                                "neighbours_too_large).")
    max_budget_tokens: int = Field(32768, ge=16, description="Largest `budget_tokens` (422 budget_too_large).")
    max_collections: int = Field(8, ge=1, description="Collections one request may name (422 "
                                 "too_many_collections).")
    duplicate_threshold: float = Field(
        0.5, gt=0, le=1, description="A candidate whose word 3-grams are at least this share repeated in passages "
        "of other documents already taken is left out as a duplicate; under it, sentences it repeats are trimmed "
        "off (docs/context.md).",
    )
    documents_first: bool = Field(
        True, description="A candidate of a document already in the context, that does not overlap its passages, "
        "waits until every candidate of a new document has been tried: more documents per budget.",
    )
    overflow: Literal["cut", "skip"] = Field(
        "cut", description="A passage that does not fit the budget whole: cut at its last sentence boundary that "
        "fits (`cut`), or left out for later ones that fit (`skip`).",
    )
    rrf_k: int = Field(60, ge=1, description="Rank constant of the reciprocal-rank merge of several collections' "
                       "candidates when no reranker scored them all.")
    rewrite: bool = Field(
        True, description="With a generator: rewrite a conversation (`messages` with earlier turns) into one "
        "standalone question before retrieving (a request's `rewrite: false` turns it off). On a CPU host it costs "
        "a short generation per request; without a generator the documented rule is used (docs/context.md).",
    )
    rewrite_timeout_s: float = Field(10.0, gt=0, description="Deadline of the rewrite; past it the rule is used.")
    rewrite_max_tokens: int = Field(64, ge=1, description="Length of the rewritten question, in tokens.")
