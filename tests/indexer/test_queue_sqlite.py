"""What only the SQLite backend has (the contract both backends share is in test_queue_contract.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from indexer.queue_sqlite import SqliteJobQueue

OLD_SCHEMA = """
CREATE TABLE jobs (id TEXT PRIMARY KEY, collection TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
    created_at REAL NOT NULL, started_at REAL, finished_at REAL, worker TEXT, lease_until REAL,
    attempts INTEGER NOT NULL DEFAULT 0, cancel_requested INTEGER NOT NULL DEFAULT 0,
    counts TEXT NOT NULL DEFAULT '{}', errors TEXT NOT NULL DEFAULT '[]', message TEXT,
    embed_seconds REAL NOT NULL DEFAULT 0);
INSERT INTO jobs (id, collection, spec, state, created_at) VALUES ('old', 'c', '{}', 'queued', 1.0);
"""


async def test_a_file_from_before_fencing_gains_lease_tokens_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
    q = SqliteJobQueue(path)
    job = await q.claim("w", 10, max_attempts=3)
    assert job is not None and (job.id, job.lease_token, job.attempts) == ("old", 1, 1)
    await q.finish(job, "succeeded")
    done = await q.get("old")
    assert done is not None and done.state == "succeeded"


async def test_uploads_live_under_the_uploads_folder_until_the_job_ends(tmp_path: Path) -> None:
    import io

    q = SqliteJobQueue(tmp_path / "jobs.sqlite3", tmp_path / "up")
    job = await q.submit("c", {}, job_id="j1", uploads=[("a/b.txt", io.BytesIO(b"hello"))])
    assert (tmp_path / "up" / "j1" / "a" / "b.txt").read_bytes() == b"hello"
    claimed = await q.claim("w", 10, max_attempts=3)
    assert claimed is not None and claimed.id == job.id
    await q.finish(claimed, "failed", "boom")
    assert not (tmp_path / "up" / "j1").exists()
