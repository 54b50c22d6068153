"""The embedded job queue: one SQLite file (WAL), shared safely by an API process and worker processes on
one host; uploads wait in a folder beside it (:class:`indexer.upload_folder.UploadFolder`).

Claims are atomic (``BEGIN IMMEDIATE``); leases make a crashed worker's job claimable again, and every write
after a claim is fenced by the claim's ``lease_token`` (see :mod:`indexer.queue`). Lease times are this host's
wall clock (``clock``, ``time.time`` unless a test passes one it steps), the same for every process that opens
the file. Calls run in a thread (``asyncio.to_thread``) with
one connection per call, so the event loop never blocks on the disk.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from indexer.queue import (
    MAX_ERRORS,
    TERMINAL,
    Counts,
    DocState,
    Doorbell,
    Job,
    JobState,
    LeaseLost,
    Upload,
    gave_up_message,
)
from indexer.upload_folder import UploadFolder

T = TypeVar("T")

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
    embed_seconds REAL NOT NULL DEFAULT 0,
    lease_token INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, created_at);
CREATE TABLE IF NOT EXISTS job_documents (
    job_id TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY (job_id, doc_id)
);
"""
FENCE = "id = ? AND lease_token = ? AND state = 'running' AND lease_until >= ?"
"""The row is still this claim's: same token, still running, lease not run out."""


class SqliteJobQueue:
    def __init__(self, path: Path, uploads_dir: Path | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        """``uploads_dir``: where uploads wait for their job (default: ``uploads`` beside the file). ``clock``:
        the wall clock every time in the file is read from (leases, timestamps); every handle on one file
        must share it."""
        self.path = path
        self._clock = clock
        self.doorbell = Doorbell()
        self.uploads = UploadFolder(uploads_dir or path.parent / "uploads")
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            columns = {r["name"] for r in db.execute("PRAGMA table_info(jobs)")}
            if "lease_token" not in columns:  # a file from before fencing
                db.execute("ALTER TABLE jobs ADD COLUMN lease_token INTEGER NOT NULL DEFAULT 0")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        def call() -> T:
            db = self._connect()
            try:
                return fn(db, *args)
            finally:
                db.close()

        return await asyncio.to_thread(call)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` inside one ``BEGIN IMMEDIATE`` transaction, rolled back on any error."""
        def tx(db: sqlite3.Connection) -> T:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(db, *args)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

        return await self._run(tx)

    def _fenced(self, db: sqlite3.Connection, job: Job, sets: str, params: Sequence[Any]) -> sqlite3.Row:
        """Update the job's row only while this claim holds it; the row's new state, or :class:`LeaseLost`."""
        row = db.execute(f"UPDATE jobs SET {sets} WHERE {FENCE} RETURNING *",
                         (*params, job.id, job.lease_token, self._clock())).fetchone()
        if row is None:
            raise LeaseLost(f"job {job.id}: lease {job.lease_token} is no longer held")
        return row

    async def close(self) -> None:
        return None

    async def submit(self, collection: str, spec: dict[str, Any], *, job_id: str | None = None,
                     uploads: Sequence[Upload] = ()) -> Job:
        job = Job(id=job_id or uuid.uuid4().hex, collection=collection, spec=spec, state="queued",
                  created_at=self._clock())
        if uploads:
            await asyncio.to_thread(self.uploads.save, job.id, uploads)

        def insert(db: sqlite3.Connection) -> None:
            db.execute("INSERT INTO jobs (id, collection, spec, state, created_at, counts) VALUES (?,?,?,?,?,?)",
                       (job.id, collection, json.dumps(spec), "queued", job.created_at,
                        json.dumps(job.counts.as_dict())))

        try:
            await self._run(insert)
        except BaseException:
            await asyncio.to_thread(self.uploads.drop, job.id)
            raise
        self.doorbell.ring()
        return job

    async def get(self, job_id: str) -> Job | None:
        row = await self._run(lambda db: db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone())
        return _job(row) if row else None

    async def list(self, *, limit: int = 50) -> list[Job]:
        rows = await self._run(lambda db: db.execute(
            "SELECT * FROM jobs ORDER BY created_at DESC, rowid DESC LIMIT ?", (limit,)).fetchall())
        return [_job(r) for r in rows]

    async def claim(self, worker: str, lease_s: float, *, max_attempts: int) -> Job | None:
        ended: list[str] = []

        def claim(db: sqlite3.Connection) -> sqlite3.Row | None:
            now = self._clock()
            while True:
                row = db.execute(
                    "SELECT * FROM jobs WHERE state = 'queued' OR (state = 'running' AND lease_until < ?) "
                    "ORDER BY created_at, rowid LIMIT 1", (now,)
                ).fetchone()
                if row is None:
                    return None
                if row["state"] == "running" and (row["cancel_requested"] or row["attempts"] >= max_attempts):
                    state, message = (("cancelled", "cancelled on request") if row["cancel_requested"]
                                      else ("failed", gave_up_message(row["attempts"], row["worker"])))
                    db.execute("UPDATE jobs SET state = ?, message = ?, finished_at = ?, lease_until = NULL "
                               "WHERE id = ?", (state, message, now, row["id"]))
                    db.execute("DELETE FROM job_documents WHERE job_id = ?", (row["id"],))
                    ended.append(row["id"])
                    continue
                claimed: sqlite3.Row = db.execute(
                    "UPDATE jobs SET state = 'running', worker = ?, lease_until = ?, attempts = attempts + 1, "
                    "lease_token = lease_token + 1, started_at = COALESCE(started_at, ?) WHERE id = ? RETURNING *",
                    (worker, now + lease_s, now, row["id"]),
                ).fetchone()
                return claimed

        row = await self._write(claim)
        for job_id in ended:
            await asyncio.to_thread(self.uploads.drop, job_id)
        return _job(row) if row else None

    async def heartbeat(self, job: Job, lease_s: float) -> bool:
        row = await self._write(lambda db: self._fenced(db, job, "lease_until = ?", (self._clock() + lease_s,)))
        return bool(row["cancel_requested"])

    async def save_progress(self, job: Job) -> None:
        params = (json.dumps(job.counts.as_dict()), json.dumps(job.errors[:MAX_ERRORS]), job.embed_seconds)
        await self._write(lambda db: self._fenced(db, job, "counts = ?, errors = ?, embed_seconds = ?", params))

    async def mark_documents(self, job: Job, docs: dict[str, DocState]) -> None:
        params = (json.dumps(job.counts.as_dict()), json.dumps(job.errors[:MAX_ERRORS]), job.embed_seconds)

        def mark(db: sqlite3.Connection) -> None:
            self._fenced(db, job, "counts = ?, errors = ?, embed_seconds = ?", params)
            db.executemany("INSERT OR REPLACE INTO job_documents (job_id, doc_id, state) VALUES (?,?,?)",
                           [(job.id, d, s) for d, s in docs.items()])

        await self._write(mark)

    async def finished_documents(self, job_id: str) -> set[str]:
        rows = await self._run(lambda db: db.execute(
            "SELECT doc_id FROM job_documents WHERE job_id = ?", (job_id,)).fetchall())
        return {r["doc_id"] for r in rows}

    async def finish(self, job: Job, state: JobState, message: str | None = None) -> None:
        finished_at = self._clock()
        params = (state, message, finished_at, json.dumps(job.counts.as_dict()),
                  json.dumps(job.errors[:MAX_ERRORS]), job.embed_seconds)

        def finish(db: sqlite3.Connection) -> None:
            self._fenced(db, job, "state = ?, message = ?, finished_at = ?, counts = ?, errors = ?, "
                                  "embed_seconds = ?, lease_until = NULL", params)
            db.execute("DELETE FROM job_documents WHERE job_id = ?", (job.id,))

        await self._write(finish)
        job.state, job.message, job.finished_at = state, message, finished_at
        await asyncio.to_thread(self.uploads.drop, job.id)

    async def release(self, job: Job) -> None:
        params = (json.dumps(job.counts.as_dict()), json.dumps(job.errors[:MAX_ERRORS]), job.embed_seconds)
        await self._write(lambda db: self._fenced(
            db, job, "state = 'queued', worker = NULL, lease_until = NULL, attempts = attempts - 1, "
                     "counts = ?, errors = ?, embed_seconds = ?", params))
        job.state = "queued"

    async def cancel(self, job_id: str) -> Job | None:
        def cancel(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is not None and row["state"] == "queued":
                db.execute("UPDATE jobs SET state = 'cancelled', finished_at = ?, message = 'cancelled before it "
                           "started' WHERE id = ?", (self._clock(), job_id))
                return True
            if row is not None and row["state"] not in TERMINAL:
                db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
            return False

        if await self._write(cancel):
            await asyncio.to_thread(self.uploads.drop, job_id)
        return await self.get(job_id)

    async def read_upload(self, job_id: str, name: str) -> bytes:
        return await asyncio.to_thread(self.uploads.read, job_id, name)


def _job(row: sqlite3.Row) -> Job:
    return Job(
        id=row["id"], collection=row["collection"], spec=json.loads(row["spec"]), state=row["state"],
        created_at=row["created_at"], started_at=row["started_at"], finished_at=row["finished_at"],
        worker=row["worker"], attempts=row["attempts"], cancel_requested=bool(row["cancel_requested"]),
        counts=Counts(**json.loads(row["counts"] or "{}")), errors=json.loads(row["errors"] or "[]"),
        message=row["message"], embed_seconds=row["embed_seconds"] or 0.0, lease_token=row["lease_token"],
    )
