"""The job queue's narrow interface. The embedded default is :class:`indexer.queue_sqlite.SqliteJobQueue`;
a server-grade backend (several workers on several machines) implements the same protocol.

Life of a job::

    queued ──claim──► running ──finish──► succeeded | failed | cancelled
                        │  ▲
                        └──┘ lease expired (worker died): claimable again, resumes where it stopped

Documents a job has finished are recorded with :meth:`JobQueue.mark_documents`, so a resumed job skips them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
DocState = Literal["indexed", "unchanged", "failed", "deleted"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
MAX_ERRORS = 1000


@dataclass
class Counts:
    documents_seen: int = 0
    documents_indexed: int = 0
    documents_unchanged: int = 0
    documents_failed: int = 0
    documents_deleted: int = 0
    files_failed: int = 0
    chunks: int = 0
    tokens: int = 0
    documents_total: int | None = None
    """Known once every file has been read."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Job:
    id: str
    collection: str
    spec: dict[str, Any]
    state: JobState
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    worker: str | None = None
    attempts: int = 0
    cancel_requested: bool = False
    counts: Counts = field(default_factory=Counts)
    errors: list[dict[str, str]] = field(default_factory=list)
    message: str | None = None
    embed_seconds: float = 0.0


class JobCancelled(Exception):
    pass


class JobFailed(Exception):
    """The job ran to its end but achieved nothing: every document it was given failed (its errors say why)."""


class JobQueue(Protocol):
    async def submit(self, collection: str, spec: dict[str, Any], *, job_id: str | None = None) -> Job: ...
    async def get(self, job_id: str) -> Job | None: ...
    async def list(self, *, limit: int = 50) -> list[Job]: ...
    async def claim(self, worker: str, lease_s: float) -> Job | None:
        """Take the oldest queued job, or a running one whose lease expired (its worker died)."""
    async def heartbeat(self, job_id: str, worker: str, lease_s: float) -> bool:
        """Extend the lease; True when cancellation was requested."""
    async def save_progress(self, job: Job) -> None: ...
    async def mark_documents(self, job: Job, docs: dict[str, DocState]) -> None:
        """Record finished documents and the job's counts in one transaction (exact after a crash)."""
    async def finished_documents(self, job_id: str) -> set[str]: ...
    async def finish(self, job: Job, state: JobState, message: str | None = None) -> None: ...
    async def cancel(self, job_id: str) -> Job | None:
        """Cancel a queued job at once, or ask its worker to stop a running one."""
    async def close(self) -> None: ...
