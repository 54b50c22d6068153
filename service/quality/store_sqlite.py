"""The log's database in a SQLite file of its own (WAL). Calls run in a thread with one connection each, as the
job queue's do, so the event loop never waits on the disk; a write waits at most ``timeout_s`` for SQLite's
lock, then fails (the recorder drops its rows and counts them)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from service.quality.store import SCHEMA, SqlLogStore, Statement


class SqliteLogStore(SqlLogStore):
    def __init__(self, path: Path, *, timeout_s: float = 2.0) -> None:
        self.path = path
        self.timeout_s = timeout_s
        path.parent.mkdir(parents=True, exist_ok=True)
        db = self._connect()
        try:
            db.execute("PRAGMA journal_mode=WAL")
            for statement in SCHEMA:
                db.execute(statement)
        finally:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    async def _execute(self, statements: Sequence[Statement]) -> list[int]:
        def run() -> list[int]:
            db = self._connect()
            try:
                db.execute("BEGIN IMMEDIATE")
                changed = [db.executemany(sql.replace("%s", "?"), params).rowcount for sql, params in statements]
                db.execute("COMMIT")
                return changed
            finally:
                db.close()  # an uncommitted transaction rolls back

        return await asyncio.to_thread(run)

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        def run() -> list[tuple[Any, ...]]:
            db = self._connect()
            try:
                return db.execute(sql.replace("%s", "?"), tuple(params)).fetchall()
            finally:
                db.close()

        return await asyncio.to_thread(run)
