"""``RAGSERVE_QUERY_LOG__*`` and ``RAGSERVE_QUALITY__*``: the search records, the query log and feedback
(service/quality/), and the retrieval-quality metrics."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from service.config.common import postgres_url


class QueryLogSettings(BaseModel):
    """Every search gets a ``search_id`` and a short record (who searched, what came back) kept for
    ``search_ttl_days``, so that feedback can be checked, whether or not the log is on. The log proper (the query
    text, the filter, scores, timings, feedback) is off by default (docs/quality.md says what it keeps)."""

    enabled: bool = Field(False, description="Keep a query log: a sampled share of searches with their text, "
                          "filter, hits, scores and timings, and the feedback given on them.")
    url: SecretStr | None = Field(
        None, description="A PostgreSQL URL (postgresql://user:password@host:5432/db) for the records and the log, "
        "shared by every API process on any host (the job queue's database serves: the tables are their own). "
        "Unset: a SQLite file of its own (`path`), never the job queue's.",
    )
    path: Path | None = Field(None, description="The SQLite file (default: <data_dir>/querylog.sqlite3).")
    sample: float = Field(1.0, ge=0.0, le=1.0, description="The share of searches the log keeps (0 to 1). "
                          "Every search still gets its short record.")
    retention_days: float = Field(30.0, gt=0, description="Log rows and their feedback are deleted this many "
                                  "days after their search, by the service's sweep.")
    search_ttl_days: float = Field(7.0, gt=0, description="How long a search's short record (and so its "
                                   "search_id, for feedback) lives; after it, feedback on the id is a 404.")
    hash_queries: bool = Field(False, description="Keep a keyed HMAC-SHA256 of the query text instead of the "
                               "text (needs `hmac_key`). Hashed rows cannot feed `ragserve eval --from-log`.")
    hmac_key: SecretStr | None = Field(None, description="The HMAC key for `hash_queries` (at least 16 "
                                       "characters); keep it out of the log's database.")
    keep_filters: bool = Field(True, description="Keep each logged search's filter (it can hold personal "
                               "data: set false to keep none).")
    max_comment_chars: int = Field(1000, ge=0, le=10000, description="Longest feedback comment accepted (422 "
                                   "over it); 0 refuses comments.")
    flush_interval_s: float = Field(0.5, gt=0, description="How often the buffered records are written, in one "
                                    "transaction, off the search path.")
    max_pending: int = Field(10000, ge=1, description="Records held for the next write at most: past it (a "
                             "slow or locked database) new ones are dropped and counted, never waited for.")
    write_timeout_s: float = Field(2.0, gt=0, description="How long one write may wait for the database "
                                   "(SQLite's lock, PostgreSQL's pool) before its rows are dropped and counted.")
    sweep_interval_s: float = Field(3600.0, gt=0, description="How often expired records and old log rows are "
                                    "deleted.")

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, url: SecretStr | None) -> SecretStr | None:
        return postgres_url(url, "url")

    @model_validator(mode="after")
    def _key_for_hashing(self) -> QueryLogSettings:
        if self.hash_queries:
            key = self.hmac_key.get_secret_value() if self.hmac_key is not None else ""
            if len(key) < 16:
                raise ValueError("hash_queries needs an hmac_key of at least 16 characters")
        return self


class QualitySettings(BaseModel):
    """The retrieval-quality series of /metrics (docs/quality.md)."""

    max_collection_labels: int = Field(
        50, ge=1, description="Collections with their own label in the quality series: the busiest this many "
        "by searches; the rest are summed under collection=\"_other\".",
    )
    low_score_floors: dict[str, float] = Field(
        default_factory=lambda: {"dense": 0.3, "rerank": 0.1},
        description="A search whose top score is under its floor counts as low-score. Keys: dense (cosine), "
        "sparse (BM25), hybrid (the fused score), rerank (the reranker's); a kind without a floor is not counted.",
    )

    @model_validator(mode="after")
    def _known_kinds(self) -> QualitySettings:
        unknown = set(self.low_score_floors) - {"dense", "sparse", "hybrid", "rerank"}
        if unknown:
            raise ValueError(f"low_score_floors: unknown kinds {sorted(unknown)} (dense, sparse, hybrid, rerank)")
        return self
