from __future__ import annotations

import asyncio
from pathlib import Path

from indexer.queue import Counts
from indexer.queue_sqlite import SqliteJobQueue


async def test_claim_is_exclusive_and_lease_expiry_hands_the_job_over(tmp_path: Path) -> None:
    q = SqliteJobQueue(tmp_path / "jobs.db")
    job = await q.submit("c", {"x": 1})
    first = await q.claim("w1", lease_s=0.2)
    assert first is not None and first.id == job.id and first.attempts == 1
    assert await q.claim("w2", lease_s=0.2) is None  # leased
    await asyncio.sleep(0.3)
    second = await q.claim("w2", lease_s=10)
    assert second is not None and second.worker == "w2" and second.attempts == 2


async def test_progress_documents_and_finish(tmp_path: Path) -> None:
    q = SqliteJobQueue(tmp_path / "jobs.db")
    await q.submit("c", {})
    job = await q.claim("w", 10)
    assert job is not None
    job.counts = Counts(documents_seen=2, documents_indexed=1)
    await q.mark_documents(job, {"a": "indexed", "b": "failed"})
    assert await q.finished_documents(job.id) == {"a", "b"}
    assert (await q.get(job.id)).counts.documents_indexed == 1  # type: ignore[union-attr]
    await q.finish(job, "succeeded")
    done = await q.get(job.id)
    assert done is not None and done.state == "succeeded" and done.finished_at
    assert await q.claim("w", 10) is None


async def test_cancel_queued_and_running(tmp_path: Path) -> None:
    q = SqliteJobQueue(tmp_path / "jobs.db")
    queued = await q.submit("c", {})
    running = await q.submit("c", {})
    cancelled = await q.cancel(queued.id)
    assert cancelled is not None and cancelled.state == "cancelled"
    job = await q.claim("w", 10)
    assert job is not None and job.id == running.id
    assert await q.heartbeat(job.id, "w", 10) is False
    after = await q.cancel(job.id)
    assert after is not None and after.state == "running" and after.cancel_requested
    assert await q.heartbeat(job.id, "w", 10) is True
    assert await q.cancel("nope") is None
