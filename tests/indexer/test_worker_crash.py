"""The real ``ragserve serve --with-worker`` process (MiniLM runner, the embedded Qdrant Edge store) killed
with SIGKILL mid-job, then restarted: the job resumes and ends with every document present once and
complete. Documents the first run recorded as indexed are skipped by the second, so any acknowledged write
that the SIGKILL lost (a WAL that did not replay) would show up here as a missing or incomplete document."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from indexer.queue_sqlite import SqliteJobQueue
from service.store.edge import EdgeStore
from tests.support.app import API_KEY
from tests.support.runners import RunnerURLs, free_port

DOCS = 400


def _serve(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--with-worker", "--port", str(port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("ragserve serve did not come up: " + log.read_text()[-3000:])


async def test_sigkill_mid_job_then_restart_indexes_everything_once(runners: RunnerURLs, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(DOCS):
        (folder / f"doc{i:04}.txt").write_text(f"document {i}: a short note about subject {i % 23}")
    long_words = " ".join(f"token{i}" for i in range(700))  # one multi-chunk document
    (folder / "long.txt").write_text(long_words)

    data = tmp_path / "data"
    port = free_port()
    env = {**os.environ, "RAGSERVE_PROFILE": "minilm", "RAGSERVE_DATA_DIR": str(data), "RAGSERVE_API_KEYS": API_KEY,
           "RAGSERVE_RUNNERS__EMBED_URL": runners.minilm_embed, "RAGSERVE_INDEXER__BATCH_TOKENS": "150",
           "RAGSERVE_INDEXER__INFLIGHT_BATCHES": "2", "RAGSERVE_INDEXER__LEASE_S": "3",
           "RAGSERVE_INDEXER__POLL_S": "0.2", "RAGSERVE_INGEST__ALLOWED_ROOTS": str(tmp_path)}
    log = tmp_path / "serve.log"
    first = _serve(env, port, log)
    api = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {API_KEY}"})
    try:
        assert (await api.post("/v1/collections", json={"name": "crash"})).status_code == 201
        r = await api.post("/v1/collections/crash/ingest", json={"source": {"kind": "path", "path": str(folder)}})
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        queue = SqliteJobQueue(data / "jobs.sqlite3")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            current = await queue.get(job_id)
            assert current is not None and current.state in ("queued", "running"), log.read_text()
            if current.counts.documents_indexed >= 60:
                break
            await asyncio.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        await api.aclose()
        if first.poll() is None:
            first.kill()
    killed_at = await queue.get(job_id)
    assert killed_at is not None and killed_at.state == "running"
    assert 0 < killed_at.counts.documents_indexed < DOCS + 1, "kill must land mid-job"

    second = _serve(env, port, log)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            final = await queue.get(job_id)
            assert final is not None
            if final.state in ("succeeded", "failed", "cancelled"):
                break
            await asyncio.sleep(0.2)
    finally:
        second.terminate()
        second.wait(30)
    assert log.read_text().count("Application shutdown complete") == 1, log.read_text()[-2000:]  # flushed, closed
    assert final.state == "succeeded", (final.message, log.read_text()[-2000:])
    assert final.attempts == 2  # the restarted worker took the job over after the lease ran out
    c = final.counts
    assert c.documents_indexed + c.documents_unchanged == DOCS + 1 and c.documents_failed == 0

    store = await EdgeStore.open(data / "qdrant")
    try:
        states = await store.doc_states("crash")
        points = await store.count("crash")
    finally:
        await store.aclose()
    assert set(states) == {f"doc{i:04}.txt" for i in range(DOCS)} | {"long.txt"}  # none missing
    assert all(s.complete for s in states.values()), [d for d, s in states.items() if not s.complete]
    assert states["long.txt"].chunk_count > 2
    assert points == DOCS + states["long.txt"].chunk_count  # every chunk once: nothing stale or duplicated
    await queue.close()
