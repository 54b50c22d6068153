"""A job's stored counts are those of exactly the documents it has recorded, whatever order two batches' writes
reach the queue in: a resumed run skips the recorded documents and keeps the stored counts, so a count that an
older write put back last would be lost for good (test_worker_crash saw a batch go missing so). Real SQLite queue;
the first batch's write is held at the queue until the second batch has either written or queued behind it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from indexer.pipeline import Pipeline
from indexer.queue_sqlite import SqliteJobQueue
from service.config import Settings
from tests.support.waiting import until_async


async def test_two_batches_store_both_counts_whichever_writes_first(tmp_path: Path) -> None:
    queue = SqliteJobQueue(tmp_path / "jobs.sqlite3")
    submitted = await queue.submit("kb", {"source": {"kind": "path", "path": str(tmp_path)}})
    job = await queue.claim("w", 600, max_attempts=3)
    assert job is not None and job.id == submitted.id
    pipeline = Pipeline(None, None, queue, Settings(), None)  # type: ignore[arg-type]  # only the recording
    held, entered = asyncio.Event(), asyncio.Event()
    write = queue._write

    async def first_held(fn: Any, *args: Any) -> Any:
        if not entered.is_set():
            entered.set()
            await held.wait()
        return await write(fn, *args)

    queue._write = first_held  # type: ignore[method-assign]
    first = asyncio.create_task(pipeline._record(job, {"a1": "indexed", "a2": "indexed"}, documents_indexed=2))
    await entered.wait()
    second = asyncio.create_task(pipeline._record(job, {"b1": "indexed"}, documents_indexed=1, chunks=5))

    async def written_or_waiting() -> bool:
        return second.done() or bool(getattr(pipeline._recording, "_waiters", None))

    await until_async(written_or_waiting, "the second batch wrote or queued behind the first", timeout_s=60)
    held.set()
    await asyncio.gather(first, second)
    stored = await queue.get(job.id)
    assert stored is not None
    assert (stored.counts.documents_indexed, stored.counts.chunks) == (3, 5)
    assert await queue.finished_documents(job.id) == {"a1", "a2", "b1"}
    await queue.close()
