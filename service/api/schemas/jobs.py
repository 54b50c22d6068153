from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from indexer.queue import Job
from indexer.spec import IngestOptions, PathSource, UrlSource


class IngestRequest(IngestOptions):
    """A server-side folder/file or a list of URLs. Uploads use multipart instead (files + ``options``)."""

    model_config = ConfigDict(extra="forbid")
    source: PathSource | UrlSource = Field(discriminator="kind")


class JobProgress(BaseModel):
    fraction: float | None = Field(description="Documents done / documents total, once the total is known.")
    tokens_per_s: float | None
    eta_s: float | None
    elapsed_s: float | None


class JobOut(BaseModel):
    id: str
    collection: str
    state: str = Field(description="queued, running, succeeded, failed or cancelled.")
    created_at: float
    started_at: float | None
    finished_at: float | None
    attempts: int = Field(description="Runs so far: above 1 when a worker died or stalled and another resumed "
                          "the job (a worker shutting down hands its job back uncounted); at "
                          "RAGSERVE_INDEXER__MAX_ATTEMPTS the job ends failed.")
    cancel_requested: bool
    counts: dict[str, Any]
    errors: list[dict[str, str]] = Field(description="Per-file and per-document errors (first 1,000).")
    message: str | None
    progress: JobProgress

    @classmethod
    def of(cls, job: Job) -> JobOut:
        c = job.counts
        end = job.finished_at or time.time()
        elapsed = end - job.started_at if job.started_at else None
        done = c.documents_indexed + c.documents_unchanged + c.documents_failed
        fraction = done / c.documents_total if c.documents_total else (1.0 if job.finished_at else None)
        rate = c.tokens / elapsed if elapsed and c.tokens else None
        eta = None
        if fraction and elapsed and 0 < fraction < 1:
            eta = elapsed * (1 - fraction) / fraction
        return cls(
            id=job.id, collection=job.collection, state=job.state, created_at=job.created_at,
            started_at=job.started_at, finished_at=job.finished_at, attempts=job.attempts,
            cancel_requested=job.cancel_requested, counts=c.as_dict(), errors=job.errors[:1000],
            message=job.message,
            progress=JobProgress(fraction=fraction, tokens_per_s=rate, eta_s=eta, elapsed_s=elapsed),
        )


class JobList(BaseModel):
    jobs: list[JobOut]
