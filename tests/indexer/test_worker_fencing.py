"""A stale worker writes nothing once its lease is gone: two real ``ragserve worker`` processes on one queue.

Worker A is frozen with SIGSTOP while it waits for an embedding answer (its proxy holds it), past its lease;
worker B takes the job over and is itself caught mid-job (its proxy holds its second answer). Then A gets its
answer and SIGCONT at once: it wakes with vectors in hand, exactly when a stale worker would write them. The
test then reads, from outside A:

- the network edge: A sends no embedding request after it was resumed;
- the queue: the job's row and its document records are field for field what they were before A resumed
  (A's mark_documents and finish were refused), and B then completes the job (attempt 2, lease token 2);
- A's store: it holds exactly the documents A had recorded as indexed before it froze, and its BM25
  statistics count exactly those: not one point, nor a statistics update, from the answer it got after
  losing the lease; B's store holds exactly the rest.

Nothing is timed. A's lease (``LEASE_A_S``) runs out in real time while A is frozen: that is the mechanism
under test (A's own monotonic clock keeps running while it is stopped), and the test waits for its effect,
B's claim, not for a duration. B's lease is long, so B never loses the job to a slow machine. "A writes nothing
after it resumed" is read once A has logged that it stopped the job and has then exited: nothing of A can
land after that.

The embedded Qdrant Edge store admits one process per folder, so each worker has its own store and the
test checks each worker's writes into its own store. What it does not show, and stays for a Qdrant server
that both workers share: a write that A had already *started* when it froze (the check passed, the call
was under way) lands when A resumes; the lease's margin (a quarter of the lease kept free at the end) makes
that need a stall inside that call, and the points it writes are the same ids with the same content that B
writes for the same job (see indexer/lease.py).
"""

from __future__ import annotations

import asyncio
import re
import signal
import sqlite3
import time
from dataclasses import asdict
from pathlib import Path

from indexer.queue import Job
from indexer.queue_sqlite import SqliteJobQueue
from indexer.spec import IngestSpec, PathSource
from service.profiles import MINILM
from service.sparse.config import SparseConfig
from service.store.edge import EdgeStore
from tests.support.embed_proxy import embed_proxy
from tests.support.runners import RunnerURLs
from tests.support.waiting import until, until_async
from tests.support.workers import WorkerProcess, start_worker

DOCS = 40
LEASE_A_S = 10.0
"""A heartbeats every 3.3 s and gives up after 7.5 s without an acknowledged one, so a loop starved for a few
seconds does not lose the job before the test freezes it; the test then waits out this lease, frozen."""
LEASE_B_S = 600.0
LIVENESS_S = 120.0
MARKER = re.compile(r"fence document (\d{3})")


def _doc_ids(texts: list[str]) -> list[str]:
    return [f"d{MARKER.search(t).group(1)}.txt" for t in texts]  # type: ignore[union-attr]


async def _create_collection(folder: Path) -> None:
    store = await EdgeStore.open(folder)
    try:
        await store.create_collection("fence", dimensions=384, model=MINILM.embedding.name, sparse=SparseConfig())
    finally:
        await store.aclose()


async def _store_state(folder: Path) -> tuple[set[str], int]:
    """The documents in a worker's store, and how many its BM25 statistics have counted."""
    store = await EdgeStore.open(folder)
    try:
        states = await store.doc_states("fence")
        info = await store.describe("fence")
    finally:
        await store.aclose()
    assert all(s.complete for s in states.values())
    return set(states), info.sparse_stats.documents if info.sparse_stats else 0


async def _ended(queue: SqliteJobQueue, job_id: str) -> Job:
    """The job once it has ended: its record, polled (another process writes it), under a liveness bound."""

    async def ended() -> Job | None:
        job = await queue.get(job_id)
        assert job is not None
        return job if job.state not in ("queued", "running") else None

    return await until_async(ended, f"job {job_id} ended", 2 * LIVENESS_S, every_s=0.1)


def _stopped(pid: int) -> bool:
    """Whether the kernel has stopped the process (state T in /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def _freeze_outside_a_write(worker: WorkerProcess, db: Path) -> None:
    """SIGSTOP the worker, making sure it is not frozen inside a queue write (SQLite would stay locked)."""
    for _ in range(200):
        worker.proc.send_signal(signal.SIGSTOP)
        until(lambda: _stopped(worker.proc.pid), "the worker stopped", LIVENESS_S, every_s=0.01)  # delivered later
        probe = sqlite3.connect(db, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:  # frozen holding the write lock: let it run out of the write, try again
            worker.proc.send_signal(signal.SIGCONT)
            time.sleep(0.05)  # nothing to wait on: the write ends inside the worker; this only spaces the tries
        finally:
            probe.close()
    raise AssertionError("the worker always held the queue's write lock")


async def test_a_worker_resumed_after_losing_its_lease_writes_nothing(runners: RunnerURLs, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(DOCS):
        (folder / f"d{i:03}.txt").write_text(f"fence document {i:03} is about topic {i % 7}.")
    db = tmp_path / "queue" / "jobs.sqlite3"
    queue = SqliteJobQueue(db)
    data = {name: tmp_path / name for name in ("a", "b")}
    for d in data.values():
        await _create_collection(d / "qdrant")

    def env(name: str, embed_url: str, lease_s: float) -> dict[str, str]:
        return {"RAGSERVE_PROFILE": "minilm", "RAGSERVE_DATA_DIR": str(data[name]),
                "RAGSERVE_RUNNERS__EMBED_URL": embed_url, "RAGSERVE_INDEXER__JOB_DB": str(db),
                # a document (~15 tokens) over BATCH_TOKENS: one document per batch, one request per batch
                "RAGSERVE_INDEXER__BATCH_TOKENS": "8", "RAGSERVE_INDEXER__INFLIGHT_BATCHES": "1",
                "RAGSERVE_INDEXER__LEASE_S": str(lease_s), "RAGSERVE_INDEXER__POLL_S": "0.2"}

    spec = IngestSpec(source=PathSource(path=str(folder))).model_dump(mode="json")
    with embed_proxy(runners.minilm_embed, hold_from=2) as proxy_a, \
            embed_proxy(runners.minilm_embed, hold_from=1) as proxy_b:
        a = start_worker(env("a", proxy_a.url, LEASE_A_S), tmp_path / "a.log")
        b: WorkerProcess | None = None
        try:
            job = await queue.submit("fence", spec)
            held_a = await asyncio.to_thread(proxy_a.wait_for_held, LIVENESS_S)  # A's third batch, answer held
            _freeze_outside_a_write(a, db)
            sent_by_a = [c.texts for c in proxy_a.calls]  # A is frozen: it sends nothing more until resumed
            done_by_a = await queue.finished_documents(job.id)
            assert len(done_by_a) > 0 and not done_by_a & set(_doc_ids(held_a.texts))

            b = start_worker(env("b", proxy_b.url, LEASE_B_S), tmp_path / "b.log")  # it claims once A's lease ran out

            async def taken_over() -> bool:  # the job's row, written by B: polled
                row = await queue.get(job.id)
                return row is not None and not (row.worker and row.worker.startswith(a.id_prefix))

            await until_async(taken_over, "B took the job over from the frozen A", 2 * LIVENESS_S)
            await asyncio.to_thread(proxy_b.wait_for_held, LIVENESS_S)  # B is mid-job: its second answer is held
            before = asdict(await queue.get(job.id)), await queue.finished_documents(job.id)  # type: ignore[arg-type]
            assert before[0]["lease_token"] == 2 and before[0]["worker"].startswith(b.id_prefix)
            assert before[1] > done_by_a  # B's first batch is recorded

            proxy_a.release()  # A's answer is waiting in its socket when it wakes
            a.proc.send_signal(signal.SIGCONT)
            a.wait_for_log(r"job \w+: lease 1 lost", LIVENESS_S)  # logged once A's run of the job has ended
            assert a.stop() == 0  # and once A has exited, nothing of it can land any more

            assert [c.texts for c in proxy_a.calls] == sent_by_a  # no embedding request after it was frozen
            after = asdict(await queue.get(job.id)), await queue.finished_documents(job.id)  # type: ignore[arg-type]
            assert after == before
            a_docs, a_counted = await _store_state(data["a"] / "qdrant")

            proxy_b.release()
            final = await _ended(queue, job.id)
        finally:
            a.stop()
            if b is not None:
                b.stop()
    assert final is not None and final.state == "succeeded", (final, b.text()[-2000:])
    assert (final.attempts, final.lease_token, final.counts.documents_indexed) == (2, 2, DOCS)
    assert final.worker is not None and final.worker.startswith(b.id_prefix)

    everything = {f"d{i:03}.txt" for i in range(DOCS)}
    assert a_docs == done_by_a and a_counted == len(done_by_a)  # nothing from the answer A got after its lease
    b_docs, b_counted = await _store_state(data["b"] / "qdrant")
    assert b_docs == everything - done_by_a and b_counted == len(b_docs)
    assert sorted(_doc_ids(proxy_a.texts())) == sorted(done_by_a | set(_doc_ids(held_a.texts)))
    assert sorted(_doc_ids(proxy_b.texts())) == sorted(everything - done_by_a)  # B embedded each of the rest once
