"""The job queue's narrow interface, and its two backends: :class:`indexer.queue_sqlite.SqliteJobQueue` (the
embedded default, one host) and :class:`indexer.queue_postgres.PostgresJobQueue` (many workers on many
machines, ``RAGSERVE_INDEXER__QUEUE_URL``). ``tests/indexer/test_queue_contract.py`` holds both to one contract.

Life of a job::

    queued ──claim──► running ──finish──► succeeded | failed | cancelled
      ▲                 │  ▲
      └─────release─────┤  └─ lease ran out (worker died or stalled): claimed again, resumes where it stopped
                        └──── lease ran out ``max_attempts`` times: failed ("gave up after N attempts: ...")

**Fencing.** Every claim gives the job a new ``lease_token`` (1, 2, 3, ... per job), kept in :class:`Job`.
Every write a worker makes after its claim (:meth:`JobQueue.heartbeat`, ``save_progress``, ``mark_documents``,
``finish``, ``release``) names that token and is applied only while the row still carries it and its lease has
not run out; otherwise nothing is written and :class:`LeaseLost` is raised. A worker that stalled past its lease
(a SIGSTOP, a long GC pause, a partition) and wakes up after another worker took the job over can therefore
neither overwrite the new owner's progress nor end the job.

Documents a job has finished are recorded with :meth:`JobQueue.mark_documents`, so a resumed job skips them.
Uploaded files are stored with the job (``submit(uploads=...)``), where every worker of the queue reads them
(``read_upload``), and dropped when the job ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO, Literal, Protocol

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
DocState = Literal["indexed", "unchanged", "failed", "deleted"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
MAX_ERRORS = 1000
Upload = tuple[str, BinaryIO]
"""An uploaded file: its (relative) name and a binary file object positioned anywhere (read from the start)."""


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
    chunks_truncated: int = 0
    """Chunks longer than the embedding model's window (unsplit passages), embedded cut to it."""
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
    lease_token: int = 0
    """The fencing token of the claim this object came from; 0 before the first claim."""


class JobCancelled(Exception):
    pass


class JobFailed(Exception):
    """The job ran to its end but achieved nothing: every document it was given failed (its errors say why)."""


class LeaseLost(Exception):
    """This worker no longer holds the job: its lease ran out, or another claim carries a newer token.
    Nothing was written; the worker must stop the job and write nothing more for it."""


def gave_up_message(attempts: int, worker: str | None) -> str:
    return (f"gave up after {attempts} attempts: the lease of worker {worker} ran out "
            "(the worker died or stalled; a job that keeps crashing its worker ends here)")


class Doorbell:
    """Rung when this process queues a job, so that a worker in the same process (``serve --with-worker``)
    claims it at once instead of at its next poll (``RAGSERVE_INDEXER__POLL_S``, 0.5 s by default: a quarter
    of a second on average added to every job). Workers in other processes, or on other machines of a
    PostgreSQL queue, still find the job by polling."""

    def __init__(self) -> None:
        self._rung = asyncio.Event()

    def ring(self) -> None:
        self._rung.set()

    async def wait(self, stop: asyncio.Event, timeout: float) -> None:
        """Until the bell rings, ``stop`` is set or ``timeout`` passes. A ring is consumed as it wakes the
        waiter; one that comes while nobody waits makes the next wait return at once (nothing is missed)."""
        waiters = [asyncio.ensure_future(self._rung.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        self._rung.clear()


class JobQueue(Protocol):
    doorbell: Doorbell
    """Rung by :meth:`submit` once the job is stored."""

    async def submit(self, collection: str, spec: dict[str, Any], *, job_id: str | None = None,
                     uploads: Sequence[Upload] = ()) -> Job:
        """Queue a job; ``uploads`` are stored with it (atomically where the backend can) for any worker."""
    async def get(self, job_id: str) -> Job | None: ...
    async def list(self, *, limit: int = 50) -> list[Job]: ...
    async def claim(self, worker: str, lease_s: float, *, max_attempts: int) -> Job | None:
        """Take the oldest queued job, or a running one whose lease ran out, with a new lease token. A job
        whose lease ran out ``max_attempts`` times ends ``failed`` instead (and a cancelled one ``cancelled``)."""
    async def heartbeat(self, job: Job, lease_s: float) -> bool:
        """Extend the lease; True when cancellation was requested. Raises :class:`LeaseLost`."""
    async def save_progress(self, job: Job) -> None:
        """Store the job's counts and errors. Raises :class:`LeaseLost`."""
    async def mark_documents(self, job: Job, docs: dict[str, DocState]) -> None:
        """Record finished documents and the job's counts in one transaction (exact after a crash).
        Raises :class:`LeaseLost`."""
    async def finished_documents(self, job_id: str) -> set[str]: ...
    async def finish(self, job: Job, state: JobState, message: str | None = None) -> None:
        """End the job, dropping its document records and uploads. Raises :class:`LeaseLost`."""
    async def release(self, job: Job) -> None:
        """Hand a running job back to the queue (a worker shutting down): claimable at once, and the run
        that released it is not counted against ``max_attempts``. Raises :class:`LeaseLost`."""
    async def cancel(self, job_id: str) -> Job | None:
        """Cancel a queued job at once, or ask its worker to stop a running one."""
    async def read_upload(self, job_id: str, name: str) -> bytes:
        """An uploaded file's bytes; :class:`FileNotFoundError` when the job has no such upload (any more)."""
    async def close(self) -> None: ...
