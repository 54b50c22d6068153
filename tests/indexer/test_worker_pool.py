"""Several real ``ragserve worker`` processes drain one PostgreSQL queue; one is killed (SIGKILL) mid-job.

Each worker reaches the MiniLM runner through its own recording proxy, so every embedding call is seen with the
worker that made it. The first worker's proxy holds the answer to its second request, and the worker is killed
while it waits: the batch it had in flight is the only work that is ever done twice. Checked:

- every job succeeds; the killed worker's job was taken over (attempt 2, lease token 2), no other job was
  claimed twice;
- each job was worked on by one worker at a time: one worker per job, and for the taken-over job every call
  of the dead worker came before the first call of the worker that took it over;
- nothing is indexed twice: every document's text was embedded exactly once across all workers, except the
  documents of the batch whose answer never reached the killed worker (exactly twice), and the documents
  are split between the workers' stores with none in two of them.

Leases are long (600 s), so no live worker loses its job however slow the machine; the killed worker's lease
is made to run out by an explicit step once the worker is dead (what time would do to it), so the takeover
waits for no clock.

Each worker has its own Qdrant Edge folder (the embedded store admits one process per folder), so "in
exactly one store" stands for "written once"; with a Qdrant server shared by all workers the same writes go
to one collection (deterministic point ids), which this machine cannot run.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter, defaultdict
from pathlib import Path

from indexer.queue import Job
from indexer.queue_postgres import PostgresJobQueue
from indexer.spec import IngestSpec, PathSource
from service.profiles import MINILM
from service.sparse.config import SparseConfig
from service.store.edge import EdgeStore
from tests.support.embed_proxy import EmbedProxy, embed_proxy
from tests.support.lease_expiry import expire_postgres_lease
from tests.support.postgres import PostgresCluster
from tests.support.runners import RunnerURLs
from tests.support.waiting import until_async
from tests.support.workers import WorkerProcess, start_worker

WORKERS = 3
JOBS = 6
DOCS = 8
LEASE_S = 600
MARKER = re.compile(r"pool job (\d) document (\d{2})")


def _doc(text: str) -> tuple[int, str]:
    m = MARKER.search(text)
    assert m is not None, text
    return int(m.group(1)), f"j{m.group(1)}-d{m.group(2)}.txt"


async def _docs_in(folder: Path) -> set[str]:
    store = await EdgeStore.open(folder)
    try:
        return set(await store.doc_states("pool"))
    finally:
        await store.aclose()


async def test_workers_drain_the_queue_and_a_killed_workers_job_is_taken_over_once(
    runners: RunnerURLs, postgres: PostgresCluster, tmp_path: Path
) -> None:
    url = postgres.create_database()
    queue = await PostgresJobQueue.open(url)
    folders = []
    for j in range(JOBS):
        folder = tmp_path / f"job{j}"
        folder.mkdir()
        for i in range(DOCS):
            (folder / f"j{j}-d{i:02}.txt").write_text(f"pool job {j} document {i:02} tells of item {i * j}.")
        folders.append(folder)
    data = [tmp_path / f"w{n}" for n in range(WORKERS)]
    for d in data:
        store = await EdgeStore.open(d / "qdrant")
        await store.create_collection("pool", dimensions=384, model=MINILM.embedding.name, sparse=SparseConfig())
        await store.aclose()

    workers: list[WorkerProcess] = []
    with embed_proxy(runners.minilm_embed, hold_from=1) as first, \
            embed_proxy(runners.minilm_embed) as second, embed_proxy(runners.minilm_embed) as third:
        proxies: list[EmbedProxy] = [first, second, third]
        try:
            for n in range(WORKERS):
                workers.append(start_worker({
                    "RAGSERVE_PROFILE": "minilm", "RAGSERVE_DATA_DIR": str(data[n]),
                    "RAGSERVE_RUNNERS__EMBED_URL": proxies[n].url, "RAGSERVE_INDEXER__QUEUE_URL": url,
                    "RAGSERVE_INDEXER__BATCH_TOKENS": "8", "RAGSERVE_INDEXER__INFLIGHT_BATCHES": "1",
                    "RAGSERVE_INDEXER__LEASE_S": str(LEASE_S), "RAGSERVE_INDEXER__POLL_S": "0.1",
                }, tmp_path / f"w{n}.log"))
            jobs = [await queue.submit("pool", IngestSpec(source=PathSource(path=str(f))).model_dump(mode="json"))
                    for f in folders]
            held = await asyncio.to_thread(first.wait_for_held, 120)
            workers[0].proc.send_signal(signal.SIGKILL)
            workers[0].proc.wait(60)
            first.release()  # the answer goes nowhere
            killed_job = _doc(held.texts[0])[0]
            await expire_postgres_lease(url, jobs[killed_job].id, 1)  # the dead worker's lease runs out now


            async def all_ended() -> list[Job | None] | None:  # job records other processes write: polled
                final = [await queue.get(j.id) for j in jobs]
                return final if all(f is not None and f.state not in ("queued", "running") for f in final) else None

            final = await until_async(all_ended, "every job ended", 300, every_s=0.2)
        finally:
            for w in workers:
                w.stop()
            await queue.close()

    logs = "\n".join(w.text()[-1500:] for w in workers)
    assert [(f.state, f.counts.documents_indexed) for f in final if f] == [("succeeded", DOCS)] * JOBS, logs
    assert [(f.attempts, f.lease_token) for f in final if f] == [
        (2, 2) if j == killed_job else (1, 1) for j in range(JOBS)]

    calls_by_job: dict[int, list[tuple[float, int]]] = defaultdict(list)  # job -> (arrived, worker) per call
    embedded: Counter[str] = Counter()
    for n, proxy in enumerate(proxies):
        for call in proxy.calls:
            docs = [_doc(t) for t in call.texts]
            assert len({j for j, _ in docs}) == 1  # a batch never mixes jobs
            calls_by_job[docs[0][0]].append((call.arrived, n))
            embedded.update(d for _, d in docs)
    for j, calls in calls_by_job.items():
        order = [n for _, n in sorted(calls)]
        runs = [n for i, n in enumerate(order) if i == 0 or order[i - 1] != n]  # consecutive calls, one per worker
        if j == killed_job:
            assert runs[0] == 0 and len(runs) == 2, order  # the dead worker, then the one that took it over
        else:
            assert len(runs) == 1, (j, order)
    twice = {_doc(t)[1] for t in held.texts}
    everything = {f"j{j}-d{i:02}.txt" for j in range(JOBS) for i in range(DOCS)}
    assert embedded == Counter({d: 2 if d in twice else 1 for d in everything})

    stored = [await _docs_in(d / "qdrant") for d in data]
    assert sum(len(s) for s in stored) == len(everything) and set().union(*stored) == everything
