"""The job queue in PostgreSQL (``RAGSERVE_INDEXER__QUEUE_URL``): any number of API processes and workers on
any number of machines share it.

- **Claims** lock the oldest claimable row with ``SELECT ... FOR UPDATE SKIP LOCKED``: concurrent workers
  never wait on each other's claim and never take the same job.
- **Leases and fencing** are those of :mod:`indexer.queue`: every write after a claim is an ``UPDATE`` whose
  ``WHERE`` names the claim's ``lease_token`` and a lease that has not run out, so it is applied or refused
  atomically with respect to a concurrent claim (the row lock orders them; a refused write changes nothing).
  Lease times come from the database's own clock (``clock_timestamp()``), never a worker's, so workers on
  machines whose clocks disagree still agree on when a lease ran out.
- **Uploads** are stored in the database, in ``ragserve_job_files`` (one ``bytea`` row per file, written in the
  same transaction as the job, deleted with it by ``ON DELETE CASCADE`` and when the job ends): every worker
  that reaches the queue reaches its files, a job never exists without them, and nothing else (a shared
  volume, an object store) has to be run, secured and cleaned. ``bytea`` rather than large objects because
  large objects are not deleted with their row (they need ``lo_unlink`` or ``vacuumlo``, and leak when a
  transaction forgets) and because one file is bounded by ``RAGSERVE_INGEST__MAX_FILE_BYTES`` (50 MB by
  default; ``bytea`` holds up to 1 GB) and is read whole by the parser anyway.
- Sessions set ``idle_in_transaction_session_timeout``, so a worker frozen inside a transaction (SIGSTOP,
  a partition) cannot hold a job's row lock for longer than that.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any, BinaryIO

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

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

NOW = "extract(epoch from clock_timestamp())::double precision"
FENCE = f"id = %s AND lease_token = %s AND state = 'running' AND lease_until >= {NOW}"
SCHEMA_LOCK = 0x7261677365727665  # "ragserve": serialises concurrent schema creation by starting processes
SCHEMA = """
CREATE TABLE IF NOT EXISTS ragserve_jobs (
    seq bigserial UNIQUE,
    id text PRIMARY KEY,
    collection text NOT NULL,
    spec jsonb NOT NULL,
    state text NOT NULL,
    created_at double precision NOT NULL,
    started_at double precision,
    finished_at double precision,
    worker text,
    lease_until double precision,
    lease_token bigint NOT NULL DEFAULT 0,
    attempts integer NOT NULL DEFAULT 0,
    cancel_requested boolean NOT NULL DEFAULT false,
    counts jsonb NOT NULL DEFAULT '{}',
    errors jsonb NOT NULL DEFAULT '[]',
    message text,
    embed_seconds double precision NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS ragserve_jobs_open ON ragserve_jobs (seq) WHERE state IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS ragserve_jobs_created ON ragserve_jobs (created_at DESC);
CREATE TABLE IF NOT EXISTS ragserve_job_documents (
    job_id text NOT NULL REFERENCES ragserve_jobs (id) ON DELETE CASCADE,
    doc_id text NOT NULL,
    state text NOT NULL,
    PRIMARY KEY (job_id, doc_id)
);
CREATE TABLE IF NOT EXISTS ragserve_job_files (
    job_id text NOT NULL REFERENCES ragserve_jobs (id) ON DELETE CASCADE,
    name text NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (job_id, name)
);
ALTER TABLE ragserve_job_files ALTER COLUMN data SET STORAGE EXTERNAL;
"""
"""``STORAGE EXTERNAL``: uploads (PDF, Office, zip-based formats) are mostly compressed already; not trying
to compress them again saves the CPU without costing space."""


class PostgresJobQueue:
    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[dict[str, Any]]]) -> None:
        self._pool = pool
        self.doorbell = Doorbell()

    @classmethod
    async def open(cls, url: str, *, pool_size: int = 4, idle_in_transaction_s: float = 30.0,
                   timeout_s: float = 30.0) -> PostgresJobQueue:
        """Connect (waiting up to ``timeout_s`` for the database) and create the tables if they are missing."""
        async def configure(conn: AsyncConnection[Any]) -> None:
            await conn.execute(f"SET idle_in_transaction_session_timeout = {int(idle_in_transaction_s * 1000)}")

        pool: AsyncConnectionPool[AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
            url, min_size=1, max_size=pool_size, open=False, configure=configure, timeout=timeout_s,
            kwargs={"autocommit": True, "row_factory": dict_row}, name="ragserve-queue",
        )
        await pool.open(wait=True, timeout=timeout_s)
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                await conn.execute(SCHEMA)
        except BaseException:
            await pool.close()
            raise
        return cls(pool)

    async def close(self) -> None:
        await self._pool.close()

    async def _fenced(self, conn: AsyncConnection[dict[str, Any]], job: Job, sets: str,
                      params: Sequence[Any]) -> dict[str, Any]:
        cur = await conn.execute(f"UPDATE ragserve_jobs SET {sets} WHERE {FENCE} RETURNING cancel_requested",
                                 (*params, job.id, job.lease_token))
        row = await cur.fetchone()
        if row is None:
            raise LeaseLost(f"job {job.id}: lease {job.lease_token} is no longer held")
        return row

    @staticmethod
    def _progress(job: Job) -> tuple[Jsonb, Jsonb, float]:
        return Jsonb(job.counts.as_dict()), Jsonb(job.errors[:MAX_ERRORS]), job.embed_seconds

    async def submit(self, collection: str, spec: dict[str, Any], *, job_id: str | None = None,
                     uploads: Sequence[Upload] = ()) -> Job:
        job_id = job_id or uuid.uuid4().hex
        async with self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                f"INSERT INTO ragserve_jobs (id, collection, spec, state, created_at, counts) "
                f"VALUES (%s, %s, %s, 'queued', {NOW}, %s) RETURNING *",
                (job_id, collection, Jsonb(spec), Jsonb(Counts().as_dict())),
            )
            row = await cur.fetchone()
            for name, file in uploads:  # one file in memory at a time
                data = await asyncio.to_thread(_read_all, file)
                await conn.execute("INSERT INTO ragserve_job_files (job_id, name, data) VALUES (%s, %s, %s)",
                                   (job_id, name, data), binary=True)
        assert row is not None
        self.doorbell.ring()
        return _job(row)

    async def get(self, job_id: str) -> Job | None:
        async with self._pool.connection() as conn:
            row = await (await conn.execute("SELECT * FROM ragserve_jobs WHERE id = %s", (job_id,))).fetchone()
        return _job(row) if row else None

    async def list(self, *, limit: int = 50) -> list[Job]:
        async with self._pool.connection() as conn:
            cur = await conn.execute("SELECT * FROM ragserve_jobs ORDER BY created_at DESC, seq DESC LIMIT %s",
                                     (limit,))
            return [_job(r) for r in await cur.fetchall()]

    async def claim(self, worker: str, lease_s: float, *, max_attempts: int) -> Job | None:
        async with self._pool.connection() as conn, conn.transaction():
            while True:
                cur = await conn.execute(
                    f"SELECT id, state, attempts, worker, cancel_requested FROM ragserve_jobs "
                    f"WHERE state = 'queued' OR (state = 'running' AND lease_until < {NOW}) "
                    f"ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
                )
                row = await cur.fetchone()
                if row is None:
                    return None
                if row["state"] == "running" and (row["cancel_requested"] or row["attempts"] >= max_attempts):
                    state, message = (("cancelled", "cancelled on request") if row["cancel_requested"]
                                      else ("failed", gave_up_message(row["attempts"], row["worker"])))
                    await conn.execute(f"UPDATE ragserve_jobs SET state = %s, message = %s, finished_at = {NOW}, "
                                       f"lease_until = NULL WHERE id = %s", (state, message, row["id"]))
                    await self._drop(conn, row["id"])
                    continue
                cur = await conn.execute(
                    f"UPDATE ragserve_jobs SET state = 'running', worker = %s, lease_until = {NOW} + %s, "
                    f"attempts = attempts + 1, lease_token = lease_token + 1, "
                    f"started_at = COALESCE(started_at, {NOW}) WHERE id = %s RETURNING *",
                    (worker, lease_s, row["id"]),
                )
                claimed = await cur.fetchone()
                assert claimed is not None
                return _job(claimed)

    @staticmethod
    async def _drop(conn: AsyncConnection[dict[str, Any]], job_id: str) -> None:
        await conn.execute("DELETE FROM ragserve_job_documents WHERE job_id = %s", (job_id,))
        await conn.execute("DELETE FROM ragserve_job_files WHERE job_id = %s", (job_id,))

    async def heartbeat(self, job: Job, lease_s: float) -> bool:
        async with self._pool.connection() as conn:
            row = await self._fenced(conn, job, f"lease_until = {NOW} + %s", (lease_s,))
        return bool(row["cancel_requested"])

    async def save_progress(self, job: Job) -> None:
        async with self._pool.connection() as conn:
            await self._fenced(conn, job, "counts = %s, errors = %s, embed_seconds = %s", self._progress(job))

    async def mark_documents(self, job: Job, docs: dict[str, DocState]) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            await self._fenced(conn, job, "counts = %s, errors = %s, embed_seconds = %s", self._progress(job))
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO ragserve_job_documents (job_id, doc_id, state) VALUES (%s, %s, %s) "
                    "ON CONFLICT (job_id, doc_id) DO UPDATE SET state = EXCLUDED.state",
                    [(job.id, d, s) for d, s in docs.items()],
                )

    async def finished_documents(self, job_id: str) -> set[str]:
        async with self._pool.connection() as conn:
            cur = await conn.execute("SELECT doc_id FROM ragserve_job_documents WHERE job_id = %s", (job_id,))
            return {r["doc_id"] for r in await cur.fetchall()}

    async def finish(self, job: Job, state: JobState, message: str | None = None) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            await self._fenced(conn, job, f"state = %s, message = %s, finished_at = {NOW}, counts = %s, errors = %s, "
                                          "embed_seconds = %s, lease_until = NULL",
                               (state, message, *self._progress(job)))
            await self._drop(conn, job.id)
            cur = await conn.execute("SELECT finished_at FROM ragserve_jobs WHERE id = %s", (job.id,))
            row = await cur.fetchone()
        job.state, job.message, job.finished_at = state, message, row["finished_at"] if row else None

    async def release(self, job: Job) -> None:
        async with self._pool.connection() as conn:
            await self._fenced(conn, job, "state = 'queued', worker = NULL, lease_until = NULL, "
                                          "attempts = attempts - 1, counts = %s, errors = %s, embed_seconds = %s",
                               self._progress(job))
        job.state = "queued"

    async def cancel(self, job_id: str) -> Job | None:
        async with self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT state FROM ragserve_jobs WHERE id = %s FOR UPDATE", (job_id,))
            row = await cur.fetchone()
            if row is not None and row["state"] == "queued":
                await conn.execute(f"UPDATE ragserve_jobs SET state = 'cancelled', finished_at = {NOW}, "
                                   "message = 'cancelled before it started' WHERE id = %s", (job_id,))
                await self._drop(conn, job_id)
            elif row is not None and row["state"] not in TERMINAL:
                await conn.execute("UPDATE ragserve_jobs SET cancel_requested = true WHERE id = %s", (job_id,))
        return await self.get(job_id)

    async def read_upload(self, job_id: str, name: str) -> bytes:
        async with self._pool.connection() as conn:
            cur = await conn.execute("SELECT data FROM ragserve_job_files WHERE job_id = %s AND name = %s",
                                     (job_id, name), binary=True)
            row = await cur.fetchone()
        if row is None:
            raise FileNotFoundError(name)
        return bytes(row["data"])


def _read_all(file: BinaryIO) -> bytes:
    file.seek(0)
    return file.read()


def _job(row: dict[str, Any]) -> Job:
    return Job(
        id=row["id"], collection=row["collection"], spec=row["spec"], state=row["state"],
        created_at=row["created_at"], started_at=row["started_at"], finished_at=row["finished_at"],
        worker=row["worker"], attempts=row["attempts"], cancel_requested=row["cancel_requested"],
        counts=Counts(**row["counts"]), errors=row["errors"], message=row["message"],
        embed_seconds=row["embed_seconds"] or 0.0, lease_token=row["lease_token"],
    )
