"""What only the PostgreSQL backend has (the contract both backends share is in test_queue_contract.py)."""

from __future__ import annotations

import asyncio

import psycopg

from indexer.queue_postgres import PostgresJobQueue
from tests.support.postgres import PostgresCluster


async def test_a_claim_skips_a_job_another_session_has_locked_instead_of_waiting(postgres: PostgresCluster) -> None:
    url = postgres.create_database()
    q = await PostgresJobQueue.open(url)
    try:
        first, second = await q.submit("c", {}), await q.submit("c", {})
        async with await psycopg.AsyncConnection.connect(url) as other, other.transaction():
            await other.execute("SELECT 1 FROM ragserve_jobs WHERE id = %s FOR UPDATE", (first.id,))
            job = await asyncio.wait_for(q.claim("w1", 10, max_attempts=3), 5)
            assert job is not None and job.id == second.id
        job = await q.claim("w2", 10, max_attempts=3)
        assert job is not None and job.id == first.id
    finally:
        await q.close()


async def test_processes_starting_together_create_the_schema_once(postgres: PostgresCluster) -> None:
    url = postgres.create_database()
    queues = await asyncio.gather(*(PostgresJobQueue.open(url) for _ in range(6)))
    try:
        job = await queues[0].submit("c", {})
        assert [(await q.get(job.id)).id for q in queues] == [job.id] * 6  # type: ignore[union-attr]
    finally:
        for q in queues:
            await q.close()
