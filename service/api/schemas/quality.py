"""Feedback, the query log and the quality summary on the wire."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class FeedbackRequest(BaseModel):
    search_id: str = Field(min_length=1, max_length=64, description="The `search_id` of a /v1/search, /v1/context "
                           "or grounded chat response (it lives RAGSERVE_QUERY_LOG__SEARCH_TTL_DAYS).")
    chunk_id: str | None = Field(None, max_length=512, description="The hit's `id`. Name the chunk or the document "
                                 "(`doc_id`: its best chunk the search returned), not both.")
    doc_id: str | None = Field(None, max_length=512, description="The hit's `doc_id`.")
    rating: int = Field(description="-1 wrong, 0 not relevant, 1 to 3 relevant (graded). A repeat rating of the "
                        "same hit by the same key replaces the earlier one.")
    comment: str | None = Field(None, description="Free text, at most RAGSERVE_QUERY_LOG__MAX_COMMENT_CHARS "
                                "characters (1,000 by default); kept in the query log with the key's id.")


class FeedbackResponse(BaseModel):
    search_id: str
    collection: str
    chunk_id: str = Field(description="The chunk rated (a document's best returned chunk when `doc_id` was sent).")
    doc_id: str
    rating: int
    stored: bool = Field(description="False while the query log is off: the rating counts in /metrics "
                         "(ragserve_feedback_total) and is kept nowhere.")


class LoggedHit(BaseModel):
    collection: str
    id: str
    doc_id: str
    score: float = Field(description="The engine's score.")
    rerank_score: float | None


class LoggedFeedback(BaseModel):
    key_id: str
    collection: str
    chunk_id: str | None
    doc_id: str
    rating: int
    comment: str | None
    created_at: float


class LoggedSearch(BaseModel):
    search_id: str
    created_at: float = Field(description="Unix seconds.")
    key_id: str
    tenant: str | None = Field(description="The searching key's tenant as field=value.")
    collections: list[str]
    query: str | None = Field(description="None when the log keeps only the query's HMAC.")
    query_hmac: str | None
    mode: str
    reranked: bool
    filter: dict[str, Any] | None
    hits: list[LoggedHit]
    timings_ms: dict[str, float]
    feedback: list[LoggedFeedback]


class QueryLogPage(BaseModel):
    rows: list[LoggedSearch]
    next_after: str | None = Field(description="Pass as `after` for the next page; None on the last.")


class QueryLogDeleted(BaseModel):
    tenant: str
    rows: int = Field(description="Log rows deleted (with their search records and feedback).")


class ScoreBucket(BaseModel):
    le: float | None = Field(description="The bucket's upper bound; None: above the last.")
    count: int


class QualitySummary(BaseModel):
    hours: float
    searches: int
    zero_hits: int
    zero_hit_rate: float | None
    top_score: dict[str, list[ScoreBucket]] = Field(
        description="Per kind (dense, sparse, hybrid: the engine's top score; rerank: the reranker's), the count "
        "of searches in each bucket; not cumulative.")
