"""The log's database in PostgreSQL (``RAGSERVE_QUERY_LOG__URL``): every API process, on any host, writes and
reads the same records, so feedback reaches a search whichever process answered it. It may be the job queue's
database: the tables are its own, and PostgreSQL has no single writer to compete for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from service.quality.store import SCHEMA, SqlLogStore, Statement

SCHEMA_LOCK = 0x72616771  # an advisory lock: two processes starting at once create the tables once


class PostgresLogStore(SqlLogStore):
    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]]) -> None:
        self._pool = pool

    @classmethod
    async def open(cls, url: str, *, timeout_s: float = 2.0, pool_size: int = 2,
                   connect_timeout_s: float = 30.0) -> PostgresLogStore:
        async def configure(conn: AsyncConnection[Any]) -> None:
            # A write that waits longer for a lock or runs longer than this fails, and its rows are dropped.
            await conn.execute(f"SET statement_timeout = {int(timeout_s * 1000)}")

        pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]] = AsyncConnectionPool(
            url, min_size=1, max_size=pool_size, open=False, configure=configure, timeout=timeout_s,
            kwargs={"autocommit": True}, name="ragserve-querylog",
        )
        await pool.open(wait=True, timeout=connect_timeout_s)
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                for statement in SCHEMA:
                    await conn.execute(statement)  # type: ignore[arg-type]  # fixed text, no input
        except BaseException:
            await pool.close()
            raise
        return cls(pool)

    async def close(self) -> None:
        await self._pool.close()

    async def _execute(self, statements: Sequence[Statement]) -> list[int]:
        changed = []
        async with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            for sql, params in statements:
                await cur.executemany(sql, params)  # type: ignore[arg-type]
                changed.append(cur.rowcount)
        return changed

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql, tuple(params))  # type: ignore[arg-type]
            return await cur.fetchall()
