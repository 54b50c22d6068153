"""A worker killed with SIGKILL mid-job resumes after restart and ends with every document indexed exactly
once: the expected point count, no duplicate (doc_id, chunk_index), nothing missing.

The worker is the real ``ragserve worker`` process (real MiniLM runner, Qdrant local mode on disk)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from service.store.qdrant import VectorStore, open_client

from indexer.queue_sqlite import SqliteJobQueue
from indexer.spec import IngestSpec, PathSource
from service.profiles import MINILM
from tests.support.runners import RunnerURLs

DOCS = 400


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "service.cli", "worker"], env=env,
                                stdout=out, stderr=subprocess.STDOUT)


async def _store_points(path: Path) -> list[tuple[str, int]]:
    store = VectorStore(open_client(url=None, path=str(path), api_key=None, timeout_s=60), timeout_s=60)
    try:
        points, offset, out = [], None, []
        while True:
            points, offset = await store.client.scroll("crash", limit=1000, offset=offset,
                                                       with_payload=["doc_id", "chunk_index"])
            out += [(p.payload["doc_id"], p.payload["chunk_index"]) for p in points]  # type: ignore[index]
            if offset is None:
                return out
    finally:
        await store.aclose()


async def test_sigkill_mid_job_then_restart_indexes_everything_once(runners: RunnerURLs, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(DOCS):
        (folder / f"doc{i:04}.txt").write_text(f"document {i}: a short note about subject {i % 23}")
    long_words = " ".join(f"token{i}" for i in range(700))  # one multi-chunk document
    (folder / "long.txt").write_text(long_words)

    data = tmp_path / "data"
    qdrant = data / "qdrant"
    store = VectorStore(open_client(url=None, path=str(qdrant), api_key=None, timeout_s=60))
    await store.create_collection("crash", dimensions=384, model=MINILM.embedding.name)
    await store.aclose()
    queue = SqliteJobQueue(data / "jobs.sqlite3")
    spec = IngestSpec(source=PathSource(path=str(folder)))
    job = await queue.submit("crash", spec.model_dump(mode="json"))

    env = {**os.environ, "RAGSERVE_PROFILE": "minilm", "RAGSERVE_DATA_DIR": str(data),
           "RAGSERVE_RUNNERS__EMBED_URL": runners.minilm_embed, "RAGSERVE_INDEXER__BATCH_TOKENS": "150",
           "RAGSERVE_INDEXER__INFLIGHT_BATCHES": "2", "RAGSERVE_INDEXER__LEASE_S": "3",
           "RAGSERVE_INDEXER__POLL_S": "0.2"}
    log = tmp_path / "worker.log"
    first = _worker(env, log)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            current = await queue.get(job.id)
            assert current is not None and current.state in ("queued", "running"), log.read_text()
            if current.counts.documents_indexed >= 60:
                break
            await asyncio.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    killed_at = await queue.get(job.id)
    assert killed_at is not None and killed_at.state == "running"
    assert 0 < killed_at.counts.documents_indexed < DOCS + 1, "kill must land mid-job"

    second = _worker(env, log)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            final = await queue.get(job.id)
            assert final is not None
            if final.state in ("succeeded", "failed", "cancelled"):
                break
            await asyncio.sleep(0.2)
    finally:
        second.terminate()
        second.wait(30)
    assert final.state == "succeeded", (final.message, log.read_text()[-2000:])
    assert final.attempts == 2  # the second worker took the job over after the lease ran out
    c = final.counts
    assert c.documents_indexed + c.documents_unchanged == DOCS + 1 and c.documents_failed == 0

    points = await _store_points(qdrant)
    long_chunks = [i for d, i in points if d == "long.txt"]
    assert len(points) == len(set(points))  # no duplicates
    assert {d for d, _ in points} == {f"doc{i:04}.txt" for i in range(DOCS)} | {"long.txt"}  # none missing
    assert sorted(long_chunks) == list(range(len(long_chunks))) and len(long_chunks) > 2
    assert len(points) == DOCS + len(long_chunks)
