"""The quality log as a use case: a search's id and short record, feedback on it, the query log's rows, who
may read them, and the sweep that enforces their lifetimes. Every way in (REST, chat, MCP, the CLI) meets
these rules here.

A search never waits on the database: :meth:`QualityLog.record` only buffers, and a background task writes the
buffer every ``flush_interval_s`` in one transaction. A full buffer (a database that is slow or locked) drops new
records and counts them (``ragserve_query_log_dropped_total``); a failed write drops its batch and counts it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.auth.principal import Principal
from service.config import Settings
from service.config.quality import QueryLogSettings
from service.errors import Forbidden, InvalidInput, NotFound
from service.quality.metrics import BUCKETS, QualityCollector, ScoreHistogram
from service.quality.records import Feedback, LogEntry, LogRow, RecordedHit, SearchRecord
from service.quality.store import ALL_TENANTS, LogStore
from service.store.tenancy import Tenant

log = logging.getLogger("ragserve.quality")

DAY_S = 86400.0
RATINGS = range(-1, 4)


def new_search_id() -> str:
    """128 random bits: unguessable, so an id in hand is a search this caller was given."""
    return "s_" + secrets.token_hex(16)


@dataclass(frozen=True)
class FeedbackResult:
    search_id: str
    collection: str
    chunk_id: str
    doc_id: str
    rating: int
    stored: bool
    """False while the query log is off: counted in /metrics, kept nowhere."""


class QualityLog:
    def __init__(self, settings: QueryLogSettings, store: LogStore, collector: QualityCollector | None = None, *,
                 wall: Callable[[], float] = time.time, sample: Callable[[], float] = random.random) -> None:
        """``wall``: the Unix clock records are stamped and swept by (a test steps its own); ``sample``: a draw
        in [0, 1) per search, kept when under ``settings.sample``."""
        self.settings = settings
        self.store = store
        self.collector = collector or QualityCollector()
        self._wall = wall
        self._sample = sample
        self._pending: dict[str, tuple[SearchRecord, LogRow | None]] = {}
        self._writing: dict[str, tuple[SearchRecord, LogRow | None]] = {}
        self._flushing = asyncio.Lock()  # one write at a time: a reader's flush waits for the loop's in progress
        self._key = settings.hmac_key.get_secret_value().encode() if settings.hmac_key is not None else b""
        self._warned_at = float("-inf")

    # -- searches ---------------------------------------------------------------------------------------------

    def record(self, *, key_id: str, tenant: Tenant | None, query: str, collections: Sequence[str], mode: str,
               reranked: bool, filter: dict[str, Any] | None, hits: Sequence[RecordedHit],
               timings_ms: dict[str, float]) -> str:
        """A new search id, its record buffered (and its log row, when the log is on and the draw keeps it)."""
        search_id = new_search_id()
        now = self._wall()
        namespace = tenant.namespace if tenant is not None else None
        record = SearchRecord(search_id, now, key_id, namespace, tuple(collections), tuple(hits), mode, reranked)
        row = None
        s = self.settings
        if s.enabled and s.sample > 0 and self._sample() < s.sample:
            hashed = s.hash_queries
            row = LogRow(search_id, now, key_id, namespace, tuple(collections), None if hashed else query,
                         self.query_hmac(query) if hashed else None, mode, reranked,
                         filter if s.keep_filters else None, tuple(hits), dict(timings_ms))
        if len(self._pending) >= s.max_pending:
            self.collector.dropped("full", 1)
        else:
            self._pending[search_id] = (record, row)
        return search_id

    def query_hmac(self, query: str) -> str:
        return hmac.new(self._key, query.encode(), hashlib.sha256).hexdigest()

    async def flush(self) -> int:
        """Write what is buffered, in one transaction: how many records were written (0 when the write failed:
        its batch is dropped and counted)."""
        async with self._flushing:
            return await self._flush()

    async def _flush(self) -> int:
        if not self._pending:
            return 0
        batch, self._pending = self._pending, {}
        self._writing = batch
        try:
            await self.store.write([r for r, _ in batch.values()], [row for _, row in batch.values() if row])
            return len(batch)
        except Exception as exc:  # noqa: BLE001 - the database's failure never reaches a search
            self.collector.dropped("error", len(batch))
            now = time.monotonic()
            if now - self._warned_at > 60:
                self._warned_at = now
                log.warning("query log: %d search records dropped, the database failed: %r", len(batch), exc)
            return 0
        finally:
            self._writing = {}

    async def _record(self, search_id: str) -> SearchRecord | None:
        held = self._pending.get(search_id) or self._writing.get(search_id)
        if held is not None:
            return held[0]
        return await self.store.search(search_id)

    # -- feedback ---------------------------------------------------------------------------------------------

    async def feedback(self, principal: Principal, *, search_id: str, chunk_id: str | None = None,
                       doc_id: str | None = None, rating: int, comment: str | None = None) -> FeedbackResult:
        s = self.settings
        if rating not in RATINGS:
            raise InvalidInput("rating must be -1 (wrong), 0 (not relevant) or 1 to 3 (relevant, graded)",
                               code="rating_out_of_range", param="rating")
        if (chunk_id is None) == (doc_id is None):
            raise InvalidInput("name the hit rated: either chunk_id or doc_id", code="no_hit_named",
                               param="chunk_id")
        if comment is not None and len(comment) > s.max_comment_chars:
            raise InvalidInput(f"comment is longer than {s.max_comment_chars} characters", code="comment_too_long",
                               param="comment")
        now = self._wall()
        record = await self._record(search_id)
        if record is None or record.created_at < now - s.search_ttl_days * DAY_S:
            raise NotFound(f"search {search_id!r} is unknown or expired (ids live {s.search_ttl_days:g} days)",
                           code="search_not_found", param="search_id")
        tenant = principal.tenant.namespace if principal.tenant is not None else None
        if record.tenant != tenant:
            raise Forbidden("this key may not rate another tenant's search", code="search_of_another_tenant",
                            param="search_id")
        hit = record.hit(chunk_id=chunk_id, doc_id=doc_id)
        if hit is None:
            named = "chunk_id" if chunk_id is not None else "doc_id"
            raise InvalidInput(f"{named} {chunk_id or doc_id!r} is not a hit this search returned",
                               code="hit_not_in_search", param=named)
        principal.check_collection(hit.collection, param="search_id")
        self.collector.observe_feedback(hit.collection, rating)
        if s.enabled:
            # A document's rating is its best returned chunk's: one hit, so a repeat by the same key replaces it.
            await self.store.put_feedback(Feedback(search_id, principal.id, tenant, hit.collection, hit.id,
                                                   hit.doc_id, rating, comment, now), record.created_at)
        return FeedbackResult(search_id, hit.collection, hit.id, hit.doc_id, rating, stored=s.enabled)

    # -- reading ----------------------------------------------------------------------------------------------

    @staticmethod
    def readable_tenant(principal: Principal) -> object:
        """Whose rows ``principal`` reads: an admin key every tenant's, a key bound to a tenant its tenant's; any
        other key none (its searches share a tenant-less space with every other such key's)."""
        if "admin" in principal.scopes:
            return ALL_TENANTS
        if principal.tenant is not None:
            return principal.tenant.namespace
        raise Forbidden("reading the query log needs the admin scope, or a key bound to a tenant",
                        code="tenant_required")

    async def read(self, principal: Principal, *, since: float | None = None, until: float | None = None,
                   after: tuple[float, str] | None = None, limit: int = 100) -> list[LogEntry]:
        tenant = self.readable_tenant(principal)
        await self.flush()  # this process's searches so far are in what it reads
        entries = await self.store.read(since=since, until=until, tenant=tenant, after=after, limit=limit)
        return [e for e in entries if all(principal.may_reach(c) for c in e.row.collections)]

    async def summary(self, principal: Principal, *, hours: float = 24.0,
                      collection: str | None = None) -> dict[str, Any]:
        """The zero-hit rate and the top-score histogram (per mode, and the reranker's) of the searches recorded
        in the last ``hours``, that ``principal`` may see: the playground's Quality view."""
        if collection is not None:
            principal.check_collection(collection)
        tenant = principal.tenant.namespace if principal.tenant is not None else None
        scope = ALL_TENANTS if "admin" in principal.scopes else tenant
        await self.flush()
        rows = await self.store.summary(since=self._wall() - hours * 3600, tenant=scope)
        searches = zero = 0
        histograms: dict[str, ScoreHistogram] = {}
        for collections_json, mode, reranked, top in rows:
            collections = json.loads(collections_json)
            if not all(principal.may_reach(c) for c in collections):
                continue
            if collection is not None and collection not in collections:
                continue
            searches += 1
            if top is None:
                zero += 1
                continue
            kind = "rerank" if reranked else mode
            if kind not in histograms:
                histograms[kind] = ScoreHistogram(BUCKETS[kind])
            histograms[kind].observe(top)
        return {
            "hours": hours, "searches": searches, "zero_hits": zero,
            "zero_hit_rate": zero / searches if searches else None,
            "top_score": {kind: [{"le": le, "count": n} for le, n in zip([*h.bounds, None], h.counts, strict=True)]
                          for kind, h in sorted(histograms.items())},
        }

    # -- lifetimes --------------------------------------------------------------------------------------------

    async def sweep(self) -> tuple[int, int]:
        """Delete expired search records and log rows past the retention (with their feedback)."""
        now, s = self._wall(), self.settings
        return await self.store.sweep(records_before=now - s.search_ttl_days * DAY_S,
                                      rows_before=now - s.retention_days * DAY_S)

    async def delete_tenant(self, tenant: str) -> int:
        return await self.store.delete_tenant(tenant)

    async def run(self, stop: asyncio.Event) -> None:
        """Write the buffer every ``flush_interval_s`` and sweep every ``sweep_interval_s`` until ``stop``;
        then write what is left."""
        s = self.settings
        next_sweep = time.monotonic()
        try:
            while not stop.is_set():
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + s.sweep_interval_s
                    try:
                        await self.sweep()
                    except Exception as exc:  # noqa: BLE001 - the next sweep tries again
                        log.warning("query log: the sweep failed: %r", exc)
                await self.flush()
                self.collector.publish()
                try:
                    await asyncio.wait_for(stop.wait(), s.flush_interval_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            await self.flush()
            self.collector.publish()

    async def aclose(self) -> None:
        await self.store.close()


def quality_metrics_dir(settings: Settings) -> Path:
    """Where the API processes of one ``serve --workers N`` publish their quality counts to each other."""
    return settings.data_dir / "metrics" / "quality"


async def open_quality_log(settings: QueryLogSettings, sqlite_path: Path, collector: QualityCollector, *,
                           wall: Callable[[], float] = time.time) -> QualityLog:
    """The log on PostgreSQL when ``settings.url`` names one, else on its SQLite file."""
    store: LogStore
    if settings.url:
        from service.quality.store_postgres import PostgresLogStore

        store = await PostgresLogStore.open(settings.url.get_secret_value(), timeout_s=settings.write_timeout_s)
    else:
        from service.quality.store_sqlite import SqliteLogStore

        store = await asyncio.to_thread(SqliteLogStore, sqlite_path, timeout_s=settings.write_timeout_s)
    return QualityLog(settings, store, collector, wall=wall)
