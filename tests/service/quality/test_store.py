"""The log's database, one contract on SQLite and PostgreSQL: records, rows, feedback replaced per key and hit,
reads scoped by tenant and paged in order, the sweep by age, a tenant's deletion."""

from __future__ import annotations

from service.quality.records import Feedback, LogEntry, LogRow, RecordedHit, SearchRecord
from service.quality.store import ALL_TENANTS, LogStore

HITS = (RecordedHit("docs", "c1", "d1", 0.81, 0.9), RecordedHit("docs", "c2", "d2", 0.75, None))


def record(i: int, tenant: str | None, at: float) -> SearchRecord:
    return SearchRecord(f"s{i}", at, f"key-{tenant}", tenant, ("docs",), HITS, "hybrid", True)


def row(i: int, tenant: str | None, at: float) -> LogRow:
    return LogRow(f"s{i}", at, f"key-{tenant}", tenant, ("docs",), f"question {i}", None, "hybrid", True,
                  {"lang": "en"}, HITS, {"search": 1.5, "total": 3.25})


def feedback(search: str, key: str, rating: int, at: float, *, chunk: str = "c1", tenant: str | None = None,
             comment: str | None = None) -> Feedback:
    return Feedback(search, key, tenant, "docs", chunk, "d1" if chunk == "c1" else "d2", rating, comment, at)


async def test_records_rows_and_feedback_read_back_exactly(log_store: LogStore) -> None:
    await log_store.write([record(1, None, 100.0), record(2, "org=a", 101.0)], [row(1, None, 100.0)])
    assert await log_store.search("s2") == record(2, "org=a", 101.0)
    assert await log_store.search("missing") is None

    await log_store.put_feedback(feedback("s1", "k", 1, 110.0, comment="close"), 100.0)
    await log_store.put_feedback(feedback("s1", "k", -1, 111.0, chunk="c2"), 100.0)
    await log_store.put_feedback(feedback("s1", "k", 3, 112.0), 100.0)  # the same key and hit: replaces
    await log_store.put_feedback(feedback("s1", "other", 0, 113.0), 100.0)  # another key: kept beside it
    entries = await log_store.read()
    assert entries == [LogEntry(row(1, None, 100.0), (
        feedback("s1", "k", -1, 111.0, chunk="c2"),
        feedback("s1", "k", 3, 112.0),
        feedback("s1", "other", 0, 113.0),
    ))]


async def test_reads_are_scoped_to_a_tenant_and_paged_in_order(log_store: LogStore) -> None:
    tenants = [None, "org=a", "org=b", "org=a", "org=a"]
    await log_store.write([record(i, t, 100.0 + i // 2) for i, t in enumerate(tenants)],
                          [row(i, t, 100.0 + i // 2) for i, t in enumerate(tenants)])
    assert [e.row.search_id for e in await log_store.read(tenant="org=a")] == ["s1", "s3", "s4"]
    assert [e.row.search_id for e in await log_store.read(tenant=None)] == ["s0"]
    first = await log_store.read(tenant=ALL_TENANTS, limit=2)
    assert [e.row.search_id for e in first] == ["s0", "s1"]
    last = first[-1].row
    rest = await log_store.read(after=(last.created_at, last.search_id), limit=10)
    assert [e.row.search_id for e in rest] == ["s2", "s3", "s4"]  # s2 and s3 share a second: the id orders them
    assert [e.row.search_id for e in await log_store.read(since=101.0, until=102.0)] == ["s2", "s3"]


async def test_the_sweep_deletes_by_age_and_a_tenant_can_be_deleted(log_store: LogStore) -> None:
    await log_store.write([record(1, "org=a", 100.0), record(2, "org=a", 200.0), record(3, "org=b", 300.0)],
                          [row(1, "org=a", 100.0), row(2, "org=a", 200.0), row(3, "org=b", 300.0)])
    for sid, at in (("s1", 100.0), ("s2", 200.0), ("s3", 300.0)):
        await log_store.put_feedback(feedback(sid, "k", 1, at + 1, tenant="org=b" if sid == "s3" else "org=a"), at)
    assert await log_store.sweep(records_before=250.0, rows_before=150.0) == (2, 1)
    assert [await log_store.search(s) is not None for s in ("s1", "s2", "s3")] == [False, False, True]
    assert [(e.row.search_id, len(e.feedback)) for e in await log_store.read()] == [("s2", 1), ("s3", 1)]

    assert await log_store.delete_tenant("org=b") == 1
    assert [e.row.search_id for e in await log_store.read()] == ["s2"]
    assert await log_store.search("s3") is None
