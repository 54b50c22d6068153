"""The log's database: search records, log rows and feedback, in SQLite (its own file, the default) or
PostgreSQL (``RAGSERVE_QUERY_LOG__URL``, shared by every API process). One set of statements serves both: the
backends differ only in how a statement reaches the database (:mod:`.store_sqlite`, :mod:`.store_postgres`).

The job queue's SQLite file is never used: a log written at search rate would compete with job claims and lease
renewals for SQLite's one writer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from service.quality.records import (
    Feedback,
    LogEntry,
    LogRow,
    SearchRecord,
    hits_from_json,
    hits_json,
)

ALL_TENANTS = object()
"""``tenant=ALL_TENANTS``: every row (an admin's read); a string or None: that tenant's rows only."""

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS ragserve_searches (
        id TEXT PRIMARY KEY, created_at DOUBLE PRECISION NOT NULL, key_id TEXT NOT NULL, tenant TEXT,
        collections TEXT NOT NULL, mode TEXT NOT NULL, reranked INTEGER NOT NULL, top_score DOUBLE PRECISION,
        hits TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS ragserve_searches_created ON ragserve_searches (created_at)",
    """CREATE TABLE IF NOT EXISTS ragserve_query_log (
        search_id TEXT PRIMARY KEY, created_at DOUBLE PRECISION NOT NULL, key_id TEXT NOT NULL, tenant TEXT,
        collections TEXT NOT NULL, query TEXT, query_hmac TEXT, mode TEXT NOT NULL, reranked INTEGER NOT NULL,
        filter TEXT, hits TEXT NOT NULL, timings TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS ragserve_query_log_created ON ragserve_query_log (created_at, search_id)",
    "CREATE INDEX IF NOT EXISTS ragserve_query_log_tenant ON ragserve_query_log (tenant, created_at)",
    """CREATE TABLE IF NOT EXISTS ragserve_feedback (
        search_id TEXT NOT NULL, key_id TEXT NOT NULL, target TEXT NOT NULL, tenant TEXT, collection TEXT NOT NULL,
        chunk_id TEXT, doc_id TEXT NOT NULL, rating INTEGER NOT NULL, comment TEXT,
        created_at DOUBLE PRECISION NOT NULL, search_created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (search_id, key_id, target))""",
    "CREATE INDEX IF NOT EXISTS ragserve_feedback_search_created ON ragserve_feedback (search_created_at)",
]

INSERT_SEARCH = (
    "INSERT INTO ragserve_searches (id, created_at, key_id, tenant, collections, mode, reranked, top_score, hits) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING"
)
INSERT_ROW = (
    "INSERT INTO ragserve_query_log (search_id, created_at, key_id, tenant, collections, query, query_hmac, mode, "
    "reranked, filter, hits, timings) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (search_id) DO NOTHING"
)
UPSERT_FEEDBACK = (
    "INSERT INTO ragserve_feedback (search_id, key_id, target, tenant, collection, chunk_id, doc_id, rating, "
    "comment, created_at, search_created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (search_id, key_id, target) DO UPDATE SET rating = excluded.rating, comment = excluded.comment, "
    "created_at = excluded.created_at"
)
SEARCH_COLUMNS = "id, created_at, key_id, tenant, collections, mode, reranked, top_score, hits"
ROW_COLUMNS = ("search_id, created_at, key_id, tenant, collections, query, query_hmac, mode, reranked, filter, hits, "
               "timings")
FEEDBACK_COLUMNS = "search_id, key_id, tenant, collection, chunk_id, doc_id, rating, comment, created_at"

Statement = tuple[str, Sequence[Sequence[Any]]]


class LogStore(Protocol):
    async def write(self, records: Sequence[SearchRecord], rows: Sequence[LogRow]) -> None: ...
    async def search(self, search_id: str) -> SearchRecord | None: ...
    async def put_feedback(self, feedback: Feedback, search_created_at: float) -> None: ...
    async def read(self, *, since: float | None = None, until: float | None = None, tenant: object = ALL_TENANTS,
                   after: tuple[float, str] | None = None, limit: int = 1000) -> list[LogEntry]: ...
    async def summary(self, *, since: float, tenant: object = ALL_TENANTS) -> list[tuple[Any, ...]]: ...
    async def sweep(self, *, records_before: float, rows_before: float) -> tuple[int, int]: ...
    async def delete_tenant(self, tenant: str) -> int: ...
    async def close(self) -> None: ...


class SqlLogStore:
    """The statements; a backend supplies :meth:`_execute` (statements in one transaction, rows changed per
    statement) and :meth:`_fetch` (a query's rows as tuples)."""

    async def _execute(self, statements: Sequence[Statement]) -> list[int]:
        raise NotImplementedError

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    async def close(self) -> None:
        return None

    async def write(self, records: Sequence[SearchRecord], rows: Sequence[LogRow]) -> None:
        statements: list[Statement] = [(INSERT_SEARCH, [_search_params(r) for r in records])]
        if rows:
            statements.append((INSERT_ROW, [_row_params(r) for r in rows]))
        await self._execute(statements)

    async def search(self, search_id: str) -> SearchRecord | None:
        found = await self._fetch(f"SELECT {SEARCH_COLUMNS} FROM ragserve_searches WHERE id = %s", (search_id,))
        return _record(found[0]) if found else None

    async def put_feedback(self, feedback: Feedback, search_created_at: float) -> None:
        f = feedback
        await self._execute([(UPSERT_FEEDBACK, [(f.search_id, f.key_id, f.target, f.tenant, f.collection,
                                                 f.chunk_id, f.doc_id, f.rating, f.comment, f.created_at,
                                                 search_created_at)])])

    async def read(self, *, since: float | None = None, until: float | None = None, tenant: object = ALL_TENANTS,
                   after: tuple[float, str] | None = None, limit: int = 1000) -> list[LogEntry]:
        """Log rows in the order they were searched (``after``: the last row of the previous page), each with
        the feedback given on its search."""
        where, params = _where(since=since, until=until, tenant=tenant)
        if after is not None:
            where.append("(created_at > %s OR (created_at = %s AND search_id > %s))")
            params += [after[0], after[0], after[1]]
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = [_row(r) for r in await self._fetch(
            f"SELECT {ROW_COLUMNS} FROM ragserve_query_log {clause} ORDER BY created_at, search_id LIMIT %s",
            (*params, limit))]
        if not rows:
            return []
        ids = [r.search_id for r in rows]
        marks = ", ".join(["%s"] * len(ids))
        given: dict[str, list[Feedback]] = {}
        for f in await self._fetch(f"SELECT {FEEDBACK_COLUMNS} FROM ragserve_feedback WHERE search_id IN ({marks}) "
                                   "ORDER BY created_at, key_id, target", ids):
            given.setdefault(f[0], []).append(_feedback(f))
        return [LogEntry(r, tuple(given.get(r.search_id, ()))) for r in rows]

    async def summary(self, *, since: float, tenant: object = ALL_TENANTS) -> list[tuple[Any, ...]]:
        """(collections, mode, reranked, top_score) of every search recorded since ``since``."""
        where, params = _where(since=since, until=None, tenant=tenant)
        return await self._fetch(
            f"SELECT collections, mode, reranked, top_score FROM ragserve_searches WHERE {' AND '.join(where)}",
            params)

    async def sweep(self, *, records_before: float, rows_before: float) -> tuple[int, int]:
        """Delete search records older than ``records_before`` and log rows (with their feedback) older than
        ``rows_before``: how many of each."""
        searches, rows, _ = await self._execute([
            ("DELETE FROM ragserve_searches WHERE created_at < %s", [(records_before,)]),
            ("DELETE FROM ragserve_query_log WHERE created_at < %s", [(rows_before,)]),
            ("DELETE FROM ragserve_feedback WHERE search_created_at < %s", [(rows_before,)]),
        ])
        return searches, rows

    async def delete_tenant(self, tenant: str) -> int:
        """Every record, log row and feedback of ``tenant``: how many log rows."""
        _, rows, _ = await self._execute([
            ("DELETE FROM ragserve_searches WHERE tenant = %s", [(tenant,)]),
            ("DELETE FROM ragserve_query_log WHERE tenant = %s", [(tenant,)]),
            ("DELETE FROM ragserve_feedback WHERE tenant = %s", [(tenant,)]),
        ])
        return rows


def _where(*, since: float | None, until: float | None, tenant: object) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if since is not None:
        where.append("created_at >= %s")
        params.append(since)
    if until is not None:
        where.append("created_at < %s")
        params.append(until)
    if tenant is None:
        where.append("tenant IS NULL")
    elif tenant is not ALL_TENANTS:
        where.append("tenant = %s")
        params.append(tenant)
    return where, params


def top_score(record: SearchRecord, reranked: bool) -> float | None:
    if not record.hits:
        return None
    best = record.hits[0]
    return best.rerank_score if reranked and best.rerank_score is not None else best.score


def _search_params(r: SearchRecord) -> tuple[Any, ...]:
    return (r.id, r.created_at, r.key_id, r.tenant, json.dumps(list(r.collections)), r.mode, int(r.reranked),
            top_score(r, r.reranked), hits_json(r.hits))


def _row_params(r: LogRow) -> tuple[Any, ...]:
    return (r.search_id, r.created_at, r.key_id, r.tenant, json.dumps(list(r.collections)), r.query, r.query_hmac,
            r.mode, int(r.reranked), None if r.filter is None else json.dumps(r.filter), hits_json(r.hits),
            json.dumps(r.timings_ms))


def _record(t: tuple[Any, ...]) -> SearchRecord:
    id_, created, key_id, tenant, collections, mode, reranked, _, hits = t
    return SearchRecord(id_, float(created), key_id, tenant, tuple(json.loads(collections)), hits_from_json(hits),
                        mode=mode, reranked=bool(reranked))


def _row(t: tuple[Any, ...]) -> LogRow:
    sid, created, key_id, tenant, collections, query, query_hmac, mode, reranked, filter_, hits, timings = t
    return LogRow(sid, float(created), key_id, tenant, tuple(json.loads(collections)), query, query_hmac, mode,
                  bool(reranked), None if filter_ is None else json.loads(filter_), hits_from_json(hits),
                  json.loads(timings))


def _feedback(t: tuple[Any, ...]) -> Feedback:
    sid, key_id, tenant, collection, chunk_id, doc_id, rating, comment, created = t
    return Feedback(sid, key_id, tenant, collection, chunk_id, doc_id, int(rating), comment, float(created))
