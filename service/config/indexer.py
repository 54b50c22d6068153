"""``RAGSERVE_INDEXER__*``: the indexing worker and its queue."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr, field_validator

from service.config.common import postgres_url


class IndexerSettings(BaseModel):
    """The indexing worker: chunking, batching toward the embedding runner, the job queue."""

    chunk_tokens: int | None = Field(
        None, description="Tokens per chunk (default: the embedding window); never above the window."
    )
    chunk_overlap: int = Field(32, ge=0, description="Tokens shared by consecutive chunks of a section.")
    batch_tokens: int = Field(8192, description="Tokens per embedding request.")
    inflight_batches: int = Field(4, description="Embedding requests kept in flight so the runner never idles.")
    batch_attempts: int = Field(3, description="Tries per batch (on top of the client's own retries).")
    tokenizer_path: str | None = Field(None, description="Tokenizer dir or hub name (default: the checkpoint's).")
    job_db: Path | None = Field(None, description="SQLite job queue (default: <data_dir>/jobs.sqlite3).")
    lease_s: float = Field(60.0, description="A running job whose worker stops heartbeating is taken over after this.")
    poll_s: float = Field(0.5, description="How often an idle worker looks for jobs; a job queued through the "
                          "worker's own process (serve --with-worker) wakes it at once.")
    max_attempts: int = Field(
        3, ge=1, description="Runs whose lease ran out (worker died or stalled) before a job ends failed."
    )
    queue_url: SecretStr | None = Field(
        None, description="PostgreSQL job queue, postgresql://user:password@host:5432/db, shared by API and workers "
        "on any number of machines. Unset: the SQLite queue at job_db.",
    )
    queue_pool_size: int = Field(4, ge=1, description="PostgreSQL queue: connections per process.")

    @field_validator("queue_url")
    @classmethod
    def _postgres_url(cls, url: SecretStr | None) -> SecretStr | None:
        return postgres_url(url, "queue_url")
