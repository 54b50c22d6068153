"""One contract, both job queue backends: SQLite (a file) and PostgreSQL (a real server on loopback).

Every test opens the queue the way a process does; "another process" is a second handle on the same file or
database, or a real child process where it matters (uploads).

Time passes only when a test says so (:attr:`Backend.elapse`): the SQLite handles share a clock the test steps,
and PostgreSQL, whose leases run on the database's own clock, has its leases moved that much nearer their end.
Leases are long (``LEASE_S``), so none runs out by itself, however slow the machine."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from indexer.queue import Counts, JobQueue, LeaseLost
from indexer.queue_postgres import PostgresJobQueue
from indexer.queue_sqlite import SqliteJobQueue
from tests.support.lease_clock import ManualClock
from tests.support.lease_expiry import age_postgres_leases

Opener = Callable[[], Awaitable[JobQueue]]
LEASE_S = 600.0
GAVE_UP = ("gave up after 2 attempts: the lease of worker w2 ran out (the worker died or stalled; a job that "
           "keeps crashing its worker ends here)")


@dataclass(frozen=True)
class Backend:
    kind: str
    location: str
    open: Opener
    """A new handle on the one queue, closed after the test."""
    elapse: Callable[[float], Awaitable[None]]
    """Let that many seconds of lease time pass, for every handle."""


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    kind = request.param
    location = str(tmp_path / "jobs.sqlite3") if kind == "sqlite" else request.getfixturevalue("postgres").create_database()
    clock = ManualClock()
    handles: list[JobQueue] = []

    async def open_() -> JobQueue:
        q: JobQueue = (SqliteJobQueue(Path(location), clock=clock) if kind == "sqlite"
                       else await PostgresJobQueue.open(location))
        handles.append(q)
        return q

    async def elapse(seconds: float) -> None:
        if kind == "sqlite":
            clock.advance(seconds)
        else:
            await age_postgres_leases(location, seconds)

    yield Backend(kind, location, open_, elapse)
    for q in handles:
        await q.close()


@pytest.fixture
async def q(backend: Backend) -> JobQueue:
    return await backend.open()


async def snapshot(q: JobQueue, job_id: str) -> tuple[dict[str, object], set[str]]:
    job = await q.get(job_id)
    assert job is not None
    return asdict(job), await q.finished_documents(job_id)


async def test_claims_take_the_oldest_job_first_each_once_with_a_new_token(q: JobQueue) -> None:
    ids = [(await q.submit("c", {"n": i})).id for i in range(3)]
    claimed = [await q.claim(f"w{i}", LEASE_S, max_attempts=3) for i in range(3)]
    assert [j.id for j in claimed if j] == ids
    assert [(j.worker, j.state, j.attempts, j.lease_token) for j in claimed if j] == [
        ("w0", "running", 1, 1), ("w1", "running", 1, 1), ("w2", "running", 1, 1)]
    assert await q.claim("w3", LEASE_S, max_attempts=3) is None


async def test_concurrent_claims_from_many_handles_never_share_a_job(backend: Backend) -> None:
    handles = [await backend.open() for _ in range(4)]
    ids = {(await handles[0].submit("c", {})).id for _ in range(24)}

    async def drain(q: JobQueue, name: str) -> list[str]:
        got = []
        while (job := await q.claim(name, LEASE_S, max_attempts=3)) is not None:
            got.append(job.id)
        return got

    results = await asyncio.gather(*(drain(h, f"w{i}") for i, h in enumerate(handles) for _ in range(2)))
    claimed = [job_id for r in results for job_id in r]
    assert sorted(claimed) == sorted(ids)  # every job once: none twice, none missed


async def test_an_expired_lease_is_taken_over_with_the_next_token(backend: Backend) -> None:
    q = await backend.open()
    job = await q.submit("c", {})
    first = await q.claim("w1", LEASE_S, max_attempts=3)
    assert first is not None and (first.id, first.lease_token) == (job.id, 1)
    assert await q.claim("w2", LEASE_S, max_attempts=3) is None  # leased
    await backend.elapse(LEASE_S / 2)
    assert await q.claim("w2", LEASE_S, max_attempts=3) is None  # half of it gone: still leased
    await backend.elapse(LEASE_S / 2 + 1)
    second = await q.claim("w2", LEASE_S, max_attempts=3)
    assert second is not None and (second.id, second.worker, second.attempts, second.lease_token) == (job.id, "w2", 2, 2)


async def test_heartbeats_keep_the_lease(backend: Backend) -> None:
    q = await backend.open()
    await q.submit("c", {})
    job = await q.claim("w1", LEASE_S, max_attempts=3)
    assert job is not None
    for _ in range(6):  # four leases' worth of time, a heartbeat every two thirds of one
        await backend.elapse(LEASE_S * 2 / 3)
        assert await q.heartbeat(job, LEASE_S) is False
        assert await q.claim("w2", LEASE_S, max_attempts=3) is None
    await backend.elapse(LEASE_S + 1)  # then no heartbeat for a whole lease: it runs out
    taken = await q.claim("w2", LEASE_S, max_attempts=3)
    assert taken is not None and (taken.id, taken.worker, taken.lease_token) == (job.id, "w2", 2)


async def test_every_write_of_a_lost_lease_is_refused_and_changes_nothing(backend: Backend) -> None:
    q = await backend.open()
    submitted = await q.submit("c", {})
    old = await q.claim("w1", LEASE_S, max_attempts=3)
    assert old is not None
    old.counts = Counts(documents_seen=1, documents_indexed=1)
    await q.mark_documents(old, {"a": "indexed"})
    await backend.elapse(LEASE_S + 1)
    new = await q.claim("w2", LEASE_S, max_attempts=3)
    assert new is not None and new.lease_token == 2
    new.counts = Counts(documents_seen=2, documents_indexed=2)
    await q.mark_documents(new, {"b": "indexed"})
    before = await snapshot(q, submitted.id)

    old.counts = Counts(documents_seen=99, documents_indexed=99)
    old.errors = [{"item": "x", "error": "stale"}]
    stale_writes: list[Callable[[], Awaitable[object]]] = [
        lambda: q.heartbeat(old, LEASE_S), lambda: q.save_progress(old), lambda: q.mark_documents(old, {"c": "indexed"}),
        lambda: q.finish(old, "succeeded"), lambda: q.release(old),
    ]
    for write in stale_writes:
        with pytest.raises(LeaseLost):
            await write()
    assert await snapshot(q, submitted.id) == before  # the row and the document records, field for field
    assert before[1] == {"a", "b"} and before[0]["worker"] == "w2" and before[0]["counts"]["documents_indexed"] == 2

    assert await q.heartbeat(new, LEASE_S) is False  # the new owner is untouched and carries on
    await q.finish(new, "succeeded")
    done = await q.get(submitted.id)
    assert done is not None and (done.state, done.lease_token, done.counts.documents_indexed) == ("succeeded", 2, 2)


async def test_a_lease_that_ran_out_unclaimed_is_refused_too(backend: Backend) -> None:
    q = await backend.open()
    await q.submit("c", {})
    job = await q.claim("w1", LEASE_S, max_attempts=3)
    assert job is not None
    await backend.elapse(LEASE_S + 1)
    with pytest.raises(LeaseLost):
        await q.heartbeat(job, LEASE_S)
    with pytest.raises(LeaseLost):
        await q.mark_documents(job, {"a": "indexed"})
    assert await q.finished_documents(job.id) == set()


async def test_attempts_cap_ends_the_job_failed_with_the_reason_and_the_queue_moves_on(backend: Backend) -> None:
    q = await backend.open()
    capped = await q.submit("c", {"source": {"kind": "upload", "files": ["f.txt"]}},
                            uploads=[("f.txt", io.BytesIO(b"x"))])
    behind = await q.submit("c", {})
    for worker in ("w1", "w2"):
        job = await q.claim(worker, LEASE_S, max_attempts=2)
        assert job is not None and job.id == capped.id
        await q.mark_documents(job, {f"doc-{worker}": "indexed"})
        await backend.elapse(LEASE_S + 1)
    nxt = await q.claim("w3", LEASE_S, max_attempts=2)
    assert nxt is not None and nxt.id == behind.id  # the capped job ended in the same claim
    failed = await q.get(capped.id)
    assert failed is not None and (failed.state, failed.message, failed.attempts) == ("failed", GAVE_UP, 2)
    assert failed.finished_at is not None
    assert await q.finished_documents(capped.id) == set()
    with pytest.raises(FileNotFoundError):
        await q.read_upload(capped.id, "f.txt")


async def test_cancel_queued_running_and_abandoned_jobs(backend: Backend) -> None:
    q = await backend.open()
    queued = await q.submit("c", {}, uploads=[("f.txt", io.BytesIO(b"x"))])
    running = await q.submit("c", {})
    abandoned = await q.submit("c", {})
    cancelled = await q.cancel(queued.id)
    assert cancelled is not None and (cancelled.state, cancelled.message) == ("cancelled", "cancelled before it started")
    with pytest.raises(FileNotFoundError):
        await q.read_upload(queued.id, "f.txt")

    job = await q.claim("w", LEASE_S, max_attempts=3)
    assert job is not None and job.id == running.id
    assert await q.heartbeat(job, LEASE_S) is False
    after = await q.cancel(job.id)
    assert after is not None and (after.state, after.cancel_requested) == ("running", True)
    assert await q.heartbeat(job, LEASE_S) is True
    await q.finish(job, "cancelled", "cancelled on request")

    dead = await q.claim("w-dead", LEASE_S, max_attempts=3)
    assert dead is not None and dead.id == abandoned.id
    await q.cancel(abandoned.id)
    await backend.elapse(LEASE_S + 1)
    assert await q.claim("w", LEASE_S, max_attempts=3) is None  # not handed to a new worker: ended instead
    ended = await q.get(abandoned.id)
    assert ended is not None and (ended.state, ended.message) == ("cancelled", "cancelled on request")
    assert await q.cancel("no-such-job") is None


async def test_documents_counts_and_finish(q: JobQueue) -> None:
    submitted = await q.submit("c", {"source": {"kind": "path", "path": "/x"}})
    job = await q.claim("w", LEASE_S, max_attempts=3)
    assert job is not None
    job.counts = Counts(documents_seen=3, documents_indexed=1, documents_failed=1, chunks=7, tokens=70)
    job.errors = [{"item": "b", "error": "no text to index"}]
    job.embed_seconds = 1.5
    await q.mark_documents(job, {"a": "indexed", "b": "failed"})
    await q.mark_documents(job, {"c": "unchanged"})
    assert await q.finished_documents(job.id) == {"a", "b", "c"}
    stored = await q.get(job.id)
    assert stored is not None
    assert (stored.counts, stored.errors, stored.embed_seconds) == (job.counts, job.errors, 1.5)
    assert stored.spec == {"source": {"kind": "path", "path": "/x"}}
    await q.finish(job, "succeeded")
    done = await q.get(submitted.id)
    assert done is not None and (done.state, done.message, done.finished_at) == ("succeeded", None, job.finished_at)
    assert done.counts == job.counts
    assert await q.finished_documents(job.id) == set()
    assert await q.claim("w", LEASE_S, max_attempts=3) is None
    assert [j.id for j in await q.list()] == [submitted.id]


async def test_release_hands_the_job_back_uncounted_with_its_progress(q: JobQueue) -> None:
    submitted = await q.submit("c", {})
    job = await q.claim("w1", LEASE_S, max_attempts=3)
    assert job is not None
    await q.mark_documents(job, {"a": "indexed"})
    await q.release(job)
    back = await q.get(submitted.id)
    assert back is not None and (back.state, back.worker, back.attempts) == ("queued", None, 0)
    again = await q.claim("w2", LEASE_S, max_attempts=3)
    assert again is not None and (again.attempts, again.lease_token) == (1, 2)
    assert await q.finished_documents(submitted.id) == {"a"}
    with pytest.raises(LeaseLost):
        await q.heartbeat(job, LEASE_S)  # the released claim is over


READER = """
import asyncio, sys
from pathlib import Path
from indexer.queue_postgres import PostgresJobQueue
from indexer.queue_sqlite import SqliteJobQueue

async def main():
    kind, location, job_id = sys.argv[1:4]
    q = SqliteJobQueue(Path(location)) if kind == "sqlite" else await PostgresJobQueue.open(location)
    for name in sys.argv[4:]:
        print(name, (await q.read_upload(job_id, name)).hex())
    await q.close()

asyncio.run(main())
"""


async def test_uploads_are_read_byte_for_byte_by_another_process(backend: Backend) -> None:
    q = await backend.open()
    files = {"notes/a.txt": "héllo\n".encode(), "b.bin": bytes(range(256)) * 3 + b"\x00\r\n", "empty.md": b""}
    job = await q.submit("c", {"source": {"kind": "upload", "files": list(files)}},
                         uploads=[(n, io.BytesIO(d)) for n, d in files.items()])
    out = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", READER, backend.kind,
                                   backend.location, job.id, *files],
                                  capture_output=True, text=True, timeout=60, check=True)
    assert dict(line.split(" ") if " " in line else (line, "") for line in out.stdout.splitlines()) == {
        n: d.hex() for n, d in files.items()}
    with pytest.raises(FileNotFoundError):
        await q.read_upload(job.id, "missing.txt")
    claimed = await q.claim("w", LEASE_S, max_attempts=3)
    assert claimed is not None
    await q.finish(claimed, "succeeded")
    with pytest.raises(FileNotFoundError):
        await q.read_upload(job.id, "b.bin")  # dropped with the job

