"""Explicit steps that make a job queue's leases run out, for the backends whose lease time a test cannot
step through a clock seam: PostgreSQL counts leases on the database's own clock (``clock_timestamp()``, by
design: workers on machines whose clocks disagree still agree on when a lease ran out), and a real worker
process counts them on the host's wall clock. Test-only: each moves ``lease_until`` in the job rows, exactly
what the passing of that much time would have done to them, and touches nothing else."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg


async def age_postgres_leases(url: str, seconds: float) -> None:
    """Every lease held in the queue at ``url`` is now ``seconds`` nearer its end (or past it)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("UPDATE ragserve_jobs SET lease_until = lease_until - %s WHERE lease_until IS NOT NULL",
                           (seconds,))


async def expire_postgres_lease(url: str, job_id: str, token: int) -> None:
    """The lease ``token`` on ``job_id`` has run out (its worker is dead): claimable at once."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "UPDATE ragserve_jobs SET lease_until = extract(epoch from clock_timestamp())::double precision - 1 "
            "WHERE id = %s AND lease_token = %s AND state = 'running'", (job_id, token))
        assert cur.rowcount == 1, f"job {job_id} is not running under lease {token}"


def expire_sqlite_lease(path: Path, job_id: str, token: int) -> None:
    """The same for the SQLite queue at ``path`` (lease times there are the host's wall clock)."""
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        cur = db.execute("UPDATE jobs SET lease_until = 0 WHERE id = ? AND lease_token = ? AND state = 'running'",
                         (job_id, token))
        assert cur.rowcount == 1, f"job {job_id} is not running under lease {token}"
    finally:
        db.close()
