"""The quality log's rules, on its SQLite file: feedback's checks (unknown, expired, another tenant's, a hit
the search did not return, a rating out of range), hashing that keeps no query text, sampling, the sweep on
a clock the test moves, and a locked database that drops rows, counts them, and never holds a search."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.auth.principal import Principal
from service.config.quality import QueryLogSettings
from service.errors import Forbidden, InvalidInput, NotFound
from service.quality.log import QualityLog
from service.quality.metrics import QualityCollector
from service.quality.records import RecordedHit
from service.quality.store_sqlite import SqliteLogStore
from service.store.tenancy import Tenant

HITS = [RecordedHit("docs", "c1", "d1", 0.8, None), RecordedHit("docs", "c2", "d2", 0.7, None),
        RecordedHit("docs", "c3", "d1", 0.6, None)]
ALICE = Principal("alice", frozenset({"read"}), tenant=Tenant("org", "a"))
ALICE_2 = Principal("alice-2", frozenset({"read"}), tenant=Tenant("org", "a"))
BOB = Principal("bob", frozenset({"read"}), tenant=Tenant("org", "b"))
PLAIN = Principal("plain", frozenset({"read"}))
ADMIN = Principal("admin", frozenset({"admin"}))


class Wall:
    """Unix time the test sets."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def wall() -> Wall:
    return Wall()


def make(tmp_path: Path, wall: Wall, **settings: object) -> QualityLog:
    s = QueryLogSettings.model_validate({"enabled": True, **settings})
    return QualityLog(s, SqliteLogStore(tmp_path / "querylog.sqlite3"), QualityCollector(), wall=wall)


def searched(log: QualityLog, who: Principal, query: str = "how do vaults rotate keys") -> str:
    return log.record(key_id=who.id, tenant=who.tenant, query=query, collections=["docs"], mode="dense",
                      reranked=False, filter={"lang": "en"}, hits=HITS, timings_ms={"total": 1.0})


async def test_feedback_is_checked_against_the_search_it_names(tmp_path: Path, wall: Wall) -> None:
    log = make(tmp_path, wall, max_comment_chars=10)
    sid = searched(log, ALICE)
    with pytest.raises(NotFound) as nf:
        await log.feedback(ALICE, search_id="s_" + "0" * 32, chunk_id="c1", rating=1)
    assert (nf.value.code, nf.value.param) == ("search_not_found", "search_id")
    with pytest.raises(InvalidInput) as bad:
        await log.feedback(ALICE, search_id=sid, chunk_id="c9", rating=1)
    assert (bad.value.code, bad.value.param) == ("hit_not_in_search", "chunk_id")
    for rating in (-2, 4):
        with pytest.raises(InvalidInput) as bad:
            await log.feedback(ALICE, search_id=sid, chunk_id="c1", rating=rating)
        assert bad.value.code == "rating_out_of_range"
    with pytest.raises(InvalidInput) as bad:
        await log.feedback(ALICE, search_id=sid, chunk_id="c1", rating=1, comment="x" * 11)
    assert bad.value.code == "comment_too_long"
    with pytest.raises(Forbidden) as other:
        await log.feedback(BOB, search_id=sid, chunk_id="c1", rating=3)
    assert other.value.code == "search_of_another_tenant"
    with pytest.raises(Forbidden):
        await log.feedback(PLAIN, search_id=sid, chunk_id="c1", rating=3)

    # Before the buffer is written, and after: the same answers.
    first = await log.feedback(ALICE, search_id=sid, doc_id="d1", rating=2)
    assert (first.chunk_id, first.doc_id, first.stored) == ("c1", "d1", True)
    assert await log.flush() == 1
    # The document's rating was its best returned chunk's (c1): rating c1 again replaces it.
    await log.feedback(ALICE, search_id=sid, chunk_id="c1", rating=-1, comment="stale")
    await log.feedback(ALICE_2, search_id=sid, chunk_id="c2", rating=0)  # same tenant, another key
    (entry,) = await log.read(ADMIN)
    assert [(f.key_id, f.chunk_id, f.doc_id, f.rating, f.comment) for f in entry.feedback] == [
        ("alice", "c1", "d1", -1, "stale"), ("alice-2", "c2", "d2", 0, None)]

    wall.now += 7 * 86400 + 1  # past the search's record lifetime
    with pytest.raises(NotFound):
        await log.feedback(ALICE, search_id=sid, chunk_id="c1", rating=1)


async def test_feedback_while_the_log_is_off_counts_and_is_not_stored(tmp_path: Path, wall: Wall) -> None:
    log = make(tmp_path, wall, enabled=False)
    sid = searched(log, ALICE)
    result = await log.feedback(ALICE, search_id=sid, chunk_id="c2", rating=3)
    assert result.stored is False
    assert log.collector.labelled()["docs"].feedback == {3: 1}
    await log.flush()
    assert await log.store.search(sid) is not None  # the short record is kept whatever the log's switch
    assert await log.read(ADMIN) == []
    with sqlite3.connect(tmp_path / "querylog.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM ragserve_feedback").fetchone() == (0,)


async def test_a_tenant_reads_only_its_rows(tmp_path: Path, wall: Wall) -> None:
    log = make(tmp_path, wall)
    ids = {who.id: searched(log, who, f"{who.id}'s question") for who in (ALICE, BOB, PLAIN)}
    await log.flush()
    assert [e.row.search_id for e in await log.read(ALICE)] == [ids["alice"]]
    assert [e.row.search_id for e in await log.read(BOB)] == [ids["bob"]]
    assert sorted(e.row.search_id for e in await log.read(ADMIN)) == sorted(ids.values())
    with pytest.raises(Forbidden):
        await log.read(PLAIN)  # no tenant, no admin: its rows share a space with every such key's
    assert await log.delete_tenant("org=a") == 1
    assert sorted(e.row.query or "" for e in await log.read(ADMIN)) == ["bob's question", "plain's question"]


def database_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.glob("querylog.sqlite3*")))


async def test_hashing_keeps_no_query_text(tmp_path: Path, wall: Wall) -> None:
    query = "does vitamin d lower the risk of fractures in the elderly"
    plain = make(tmp_path / "plain", wall)
    searched(plain, ALICE, query)
    await plain.flush()
    assert query.encode() in database_bytes(tmp_path / "plain")  # the check below can see the text

    log = make(tmp_path, wall, hash_queries=True, hmac_key="k" * 32)
    sid = searched(log, ALICE, query)
    await log.flush()
    raw = database_bytes(tmp_path)
    assert query.encode() not in raw and b"vitamin" not in raw
    (entry,) = await log.read(ADMIN)
    assert (entry.row.search_id, entry.row.query) == (sid, None)
    import hashlib
    import hmac

    assert entry.row.query_hmac == hmac.new(b"k" * 32, query.encode(), hashlib.sha256).hexdigest()


async def test_sampling_keeps_the_drawn_share_and_every_record(tmp_path: Path, wall: Wall) -> None:
    draws: Iterator[float] = iter([0.05, 0.5, 0.09, 0.95])
    log = make(tmp_path, wall, sample=0.1)
    log._sample = lambda: next(draws)
    ids = [searched(log, ALICE, f"q{i}") for i in range(4)]
    await log.flush()
    assert sorted(e.row.query or "" for e in await log.read(ADMIN)) == ["q0", "q2"]
    assert all([await log.store.search(i) is not None for i in ids])


async def test_the_sweep_removes_rows_past_the_retention(tmp_path: Path, wall: Wall) -> None:
    log = make(tmp_path, wall, retention_days=2, search_ttl_days=1)
    old = searched(log, ALICE, "old")
    await log.feedback(ALICE, search_id=old, chunk_id="c1", rating=1)
    wall.now += 1.5 * 86400
    new = searched(log, ALICE, "new")
    await log.flush()
    assert await log.sweep() == (1, 0)  # the old record expired; its log row is inside the retention
    assert [e.row.query for e in await log.read(ADMIN)] == ["old", "new"]
    wall.now += 0.6 * 86400  # the old row is now 2.1 days old
    assert await log.sweep() == (0, 1)  # the new record is 0.6 days old: kept
    (entry,) = await log.read(ADMIN)
    assert (entry.row.search_id, entry.feedback) == (new, ())
    with sqlite3.connect(tmp_path / "querylog.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM ragserve_feedback").fetchone() == (0,)


async def test_a_locked_database_drops_rows_and_counts_them(tmp_path: Path, wall: Wall) -> None:
    log = make(tmp_path, wall, write_timeout_s=0.05, max_pending=3)
    holder = sqlite3.connect(tmp_path / "querylog.sqlite3", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds SQLite's one write lock
    try:
        ids = [searched(log, ALICE, f"q{i}") for i in range(5)]  # returns at once: only buffered
        assert len(set(ids)) == 5
        assert log.collector._dropped == {"full": 2}
        assert await log.flush() == 0
        assert log.collector._dropped == {"full": 2, "error": 3}
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    later = searched(log, ALICE, "after the lock")
    assert await log.flush() == 1
    assert [e.row.search_id for e in await log.read(ADMIN)] == [later]


async def test_a_read_waits_for_the_write_in_progress(tmp_path: Path, wall: Wall) -> None:
    """The loop's write and a reader's flush never overlap: the reader sees the rows being written, and a record
    being written is still found for feedback."""
    log = make(tmp_path, wall)
    gate, entered = asyncio.Event(), asyncio.Event()
    write = log.store.write

    async def held(records: Any, rows: Any) -> None:
        entered.set()
        await gate.wait()
        await write(records, rows)

    log.store.write = held  # type: ignore[method-assign]
    sid = searched(log, ALICE)
    writing = asyncio.create_task(log.flush())
    await entered.wait()
    assert (await log.feedback(ALICE, search_id=sid, chunk_id="c1", rating=1)).stored is True
    reading = asyncio.create_task(log.read(ADMIN))
    gate.set()
    assert [e.row.search_id for e in await reading] == [sid]
    assert await writing == 1
