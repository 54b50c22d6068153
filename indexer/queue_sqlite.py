"""The embedded job queue: one SQLite file (WAL), shared safely by an API process and worker processes.

Claims are atomic (``BEGIN IMMEDIATE``); leases make a crashed worker's job claimable again. Calls run in a
thread (``asyncio.to_thread``) with one connection per call, so the event loop never blocks on the disk.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from indexer.queue import MAX_ERRORS, TERMINAL, Counts, DocState, Job, JobState

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    collection TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    worker TEXT,
    lease_until REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    counts TEXT NOT NULL DEFAULT '{}',
    errors TEXT NOT NULL DEFAULT '[]',
    message TEXT,
    embed_seconds REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, created_at);
CREATE TABLE IF NOT EXISTS job_documents (
    job_id TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY (job_id, doc_id)
);
"""


class SqliteJobQueue:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    async def _run(self, fn: Any, *args: Any) -> Any:
        def call() -> Any:
            db = self._connect()
            try:
                return fn(db, *args)
            finally:
                db.close()

        return await asyncio.to_thread(call)

    async def close(self) -> None:
        return None

    async def submit(self, collection: str, spec: dict[str, Any], *, job_id: str | None = None) -> Job:
        job = Job(id=job_id or uuid.uuid4().hex, collection=collection, spec=spec, state="queued",
                  created_at=time.time())

        def insert(db: sqlite3.Connection) -> None:
            db.execute("INSERT INTO jobs (id, collection, spec, state, created_at, counts) VALUES (?,?,?,?,?,?)",
                       (job.id, collection, json.dumps(spec), "queued", job.created_at,
                        json.dumps(job.counts.as_dict())))

        await self._run(insert)
        return job

    async def get(self, job_id: str) -> Job | None:
        row = await self._run(lambda db: db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone())
        return _job(row) if row else None

    async def list(self, *, limit: int = 50) -> list[Job]:
        rows = await self._run(
            lambda db: db.execute("SELECT * FROM jobs ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
        )
        return [_job(r) for r in rows]

    async def claim(self, worker: str, lease_s: float) -> Job | None:
        def claim(db: sqlite3.Connection) -> sqlite3.Row | None:
            now = time.time()
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT id FROM jobs WHERE state = 'queued' OR (state = 'running' AND lease_until < ?) "
                    "ORDER BY created_at LIMIT 1", (now,)
                ).fetchone()
                if row is None:
                    db.execute("COMMIT")
                    return None
                db.execute(
                    "UPDATE jobs SET state = 'running', worker = ?, lease_until = ?, attempts = attempts + 1, "
                    "started_at = COALESCE(started_at, ?) WHERE id = ?",
                    (worker, now + lease_s, now, row["id"]),
                )
                claimed = db.execute("SELECT * FROM jobs WHERE id = ?", (row["id"],)).fetchone()
                db.execute("COMMIT")
                return claimed
            except BaseException:
                db.execute("ROLLBACK")
                raise

        row = await self._run(claim)
        return _job(row) if row else None

    async def heartbeat(self, job_id: str, worker: str, lease_s: float) -> bool:
        def beat(db: sqlite3.Connection) -> bool:
            db.execute("UPDATE jobs SET lease_until = ? WHERE id = ? AND worker = ?",
                       (time.time() + lease_s, job_id, worker))
            row = db.execute("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
            return bool(row and row["cancel_requested"])

        return bool(await self._run(beat))

    async def save_progress(self, job: Job) -> None:
        await self._run(lambda db: db.execute(
            "UPDATE jobs SET counts = ?, errors = ?, embed_seconds = ? WHERE id = ?",
            (json.dumps(job.counts.as_dict()), json.dumps(job.errors[:MAX_ERRORS]), job.embed_seconds, job.id),
        ))

    async def mark_documents(self, job: Job, docs: dict[str, DocState]) -> None:
        counts, errors = json.dumps(job.counts.as_dict()), json.dumps(job.errors[:MAX_ERRORS])

        def mark(db: sqlite3.Connection) -> None:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR REPLACE INTO job_documents (job_id, doc_id, state) VALUES (?,?,?)",
                               [(job.id, d, s) for d, s in docs.items()])
                db.execute("UPDATE jobs SET counts = ?, errors = ?, embed_seconds = ? WHERE id = ?",
                           (counts, errors, job.embed_seconds, job.id))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

        await self._run(mark)

    async def finished_documents(self, job_id: str) -> set[str]:
        rows = await self._run(lambda db: db.execute(
            "SELECT doc_id FROM job_documents WHERE job_id = ?", (job_id,)).fetchall())
        return {r["doc_id"] for r in rows}

    async def finish(self, job: Job, state: JobState, message: str | None = None) -> None:
        job.state, job.message, job.finished_at = state, message, time.time()

        def finish(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE jobs SET state = ?, message = ?, finished_at = ?, counts = ?, errors = ?, embed_seconds = ?, "
                "lease_until = NULL WHERE id = ?",
                (state, message, job.finished_at, json.dumps(job.counts.as_dict()),
                 json.dumps(job.errors[:MAX_ERRORS]), job.embed_seconds, job.id),
            )
            db.execute("DELETE FROM job_documents WHERE job_id = ?", (job.id,))

        await self._run(finish)

    async def cancel(self, job_id: str) -> Job | None:
        def cancel(db: sqlite3.Connection) -> None:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is not None and row["state"] == "queued":
                db.execute("UPDATE jobs SET state = 'cancelled', finished_at = ?, message = 'cancelled before it "
                           "started' WHERE id = ?", (time.time(), job_id))
            elif row is not None and row["state"] not in TERMINAL:
                db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
            db.execute("COMMIT")

        await self._run(cancel)
        return await self.get(job_id)


def _job(row: sqlite3.Row) -> Job:
    return Job(
        id=row["id"], collection=row["collection"], spec=json.loads(row["spec"]), state=row["state"],
        created_at=row["created_at"], started_at=row["started_at"], finished_at=row["finished_at"],
        worker=row["worker"], attempts=row["attempts"], cancel_requested=bool(row["cancel_requested"]),
        counts=Counts(**json.loads(row["counts"] or "{}")), errors=json.loads(row["errors"] or "[]"),
        message=row["message"], embed_seconds=row["embed_seconds"] or 0.0,
    )
