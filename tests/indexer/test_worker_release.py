"""SIGTERM to a real ``ragserve worker`` mid-job (a rollout, a scale-down) hands the job back to the queue at
once, uncounted, with its progress: the next worker resumes it without waiting for the lease and without
using up one of its attempts."""

from __future__ import annotations

import asyncio
from pathlib import Path

from indexer.queue_sqlite import SqliteJobQueue
from indexer.spec import IngestSpec, PathSource
from service.profiles import MINILM
from service.sparse.config import SparseConfig
from service.store.edge import EdgeStore
from tests.support.embed_proxy import embed_proxy
from tests.support.runners import RunnerURLs
from tests.support.workers import start_worker


async def test_sigterm_hands_the_running_job_back_at_once(runners: RunnerURLs, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(6):
        (folder / f"d{i}.txt").write_text(f"release document {i} is about topic {i}.")
    db = tmp_path / "jobs.sqlite3"
    store = await EdgeStore.open(tmp_path / "data" / "qdrant")
    await store.create_collection("rel", dimensions=384, model=MINILM.embedding.name, sparse=SparseConfig())
    await store.aclose()
    queue = SqliteJobQueue(db)
    with embed_proxy(runners.minilm_embed, hold_from=2) as proxy:
        worker = start_worker({
            "RAGSERVE_PROFILE": "minilm", "RAGSERVE_DATA_DIR": str(tmp_path / "data"),
            "RAGSERVE_RUNNERS__EMBED_URL": proxy.url, "RAGSERVE_INDEXER__JOB_DB": str(db),
            "RAGSERVE_INDEXER__BATCH_TOKENS": "8", "RAGSERVE_INDEXER__INFLIGHT_BATCHES": "1",
            "RAGSERVE_INDEXER__LEASE_S": "600", "RAGSERVE_INDEXER__POLL_S": "0.2",
        }, tmp_path / "worker.log")
        try:
            job = await queue.submit("rel", IngestSpec(source=PathSource(path=str(folder))).model_dump(mode="json"))
            await asyncio.to_thread(proxy.wait_for_held, 120)  # mid-job: two documents done, the third in flight
            worker.proc.terminate()
            assert await asyncio.to_thread(worker.proc.wait, 60) == 0
        finally:
            worker.stop()
    back = await queue.get(job.id)
    # Queued again, by nobody, uncounted, though its 600 s lease never ran out (the worker exited inside the 60 s
    # wait above): the worker handed it back itself. A lease that runs out leaves the row 'running' instead.
    assert back is not None and (back.state, back.worker, back.attempts, back.lease_token) == ("queued", None, 0, 1)
    assert await queue.finished_documents(job.id) == {"d0.txt", "d1.txt"}
    assert back.counts.documents_indexed == 2
    again = await queue.claim("next", 60, max_attempts=1)  # one attempt left is enough: the release cost none
    assert again is not None and (again.id, again.attempts, again.lease_token) == (job.id, 1, 2)
    assert "released on shutdown" in worker.text()
