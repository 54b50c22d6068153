"""Jobs drained per second by 1, 2 and 4 ``ragserve worker`` processes on the PostgreSQL queue.

    python -m tests.bench.bench_queue [--jobs 60] [--docs 3] [--workers 1,2,4] [--runner-url URL] [--json]
                                      [--queue-jobs 2000]

Small jobs (``--docs`` one-line documents each), so the figure is the queue and per-job overhead (claim,
lease, collection and document-state reads, embedding round trip, upsert, flush, finish) more than embedding
throughput. A durable PostgreSQL cluster (fsync on, PostgreSQL's defaults) on loopback; each worker has its
own embedded store folder, all reach the same MiniLM runner. Workers are started and polling before the jobs
are submitted; the time is from the first job's creation to the last job's end, both by the database clock.
Without --runner-url it starts a MiniLM runner itself.

Then the queue alone (``--queue-jobs``, 0 to skip): the same numbers of processes run only the queue's side
of a job (claim, heartbeat, mark three documents, finish) as fast as they can, which is the ceiling the
queue itself puts on draining.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from indexer.queue_postgres import PostgresJobQueue
from indexer.spec import IngestSpec, PathSource
from service.config import Settings
from service.profiles import MINILM
from service.runners.launcher import runner_specs, running
from service.sparse.config import SparseConfig
from service.store.edge import EdgeStore
from tests.support.postgres import PostgresCluster, running_postgres
from tests.support.runners import free_port
from tests.support.workers import start_worker


async def drain(cluster: PostgresCluster, runner_url: str, workers: int, jobs: int, docs: int, root: Path) -> dict:  # type: ignore[type-arg]
    url = cluster.create_database()
    folders = []
    for j in range(jobs):
        folder = root / f"n{workers}" / f"job{j}"
        folder.mkdir(parents=True)
        for i in range(docs):
            (folder / f"d{i}.txt").write_text(f"job {j} document {i}: a short note about item {i * j}.")
        folders.append(folder)
    data = [root / f"n{workers}" / f"w{n}" for n in range(workers)]
    for d in data:
        store = await EdgeStore.open(d / "qdrant")
        await store.create_collection("bench", dimensions=384, model=MINILM.embedding.name, sparse=SparseConfig())
        await store.aclose()
    procs = [start_worker({"RAGSERVE_PROFILE": "minilm", "RAGSERVE_DATA_DIR": str(d),
                           "RAGSERVE_RUNNERS__EMBED_URL": runner_url, "RAGSERVE_INDEXER__QUEUE_URL": url,
                           "RAGSERVE_INDEXER__POLL_S": "0.1"}, d.parent / f"{d.name}.log") for d in data]
    queue = await PostgresJobQueue.open(url)
    try:
        submitted = [await queue.submit("bench", IngestSpec(source=PathSource(path=str(f))).model_dump(mode="json"))
                     for f in folders]
        while True:
            final = [await queue.get(j.id) for j in submitted]
            if all(f is not None and f.finished_at is not None for f in final):
                break
            await asyncio.sleep(0.1)
    finally:
        for p in procs:
            p.stop()
        await queue.close()
    states = [f.state for f in final if f]
    assert states == ["succeeded"] * jobs, states
    start = min(f.created_at for f in final if f)
    end = max(f.finished_at for f in final if f and f.finished_at)
    per_worker: dict[str, int] = {}
    for f in final:
        assert f is not None and f.worker
        per_worker[f.worker] = per_worker.get(f.worker, 0) + 1
    durations = sorted(f.finished_at - f.started_at for f in final if f and f.finished_at and f.started_at)
    return {"workers": workers, "jobs": jobs, "docs_per_job": docs, "seconds": round(end - start, 2),
            "jobs_per_s": round(jobs / (end - start), 2), "job_s_p50": round(durations[len(durations) // 2], 3),
            "job_s_max": round(durations[-1], 3),
            "jobs_by_worker": sorted(per_worker.values())}


QUEUE_ONLY = """
import asyncio, sys
from indexer.queue import Counts
from indexer.queue_postgres import PostgresJobQueue

async def main():
    q = await PostgresJobQueue.open(sys.argv[1], pool_size=2)
    print("ready", flush=True)
    sys.stdin.readline()
    while (job := await q.claim(sys.argv[2], 60, max_attempts=3)) is not None:
        await q.heartbeat(job, 60)
        job.counts = Counts(documents_seen=3, documents_indexed=3, chunks=3)
        await q.mark_documents(job, {"a": "indexed", "b": "indexed", "c": "indexed"})
        await q.finish(job, "succeeded")
    await q.close()

asyncio.run(main())
"""


def _run_queue_processes(url: str, processes: int) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", QUEUE_ONLY, url, f"p{n}"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for n in range(processes)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:  # all connected: go
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        assert p.wait(600) == 0


async def queue_only(cluster: PostgresCluster, processes: int, jobs: int) -> dict:  # type: ignore[type-arg]
    url = cluster.create_database()
    queue = await PostgresJobQueue.open(url)
    try:
        submitted = [await queue.submit("bench", {"source": {"kind": "path", "path": "/none"}}) for _ in range(jobs)]
        await asyncio.to_thread(_run_queue_processes, url, processes)
        final = [await queue.get(j.id) for j in submitted]
    finally:
        await queue.close()
    assert all(f is not None and f.state == "succeeded" for f in final)
    start = min(f.started_at for f in final if f and f.started_at)
    end = max(f.finished_at for f in final if f and f.finished_at)
    return {"processes": processes, "jobs": jobs, "seconds": round(end - start, 2),
            "jobs_per_s": round(jobs / (end - start), 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--docs", type=int, default=3, help="documents per job")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--runner-url", default=None)
    parser.add_argument("--queue-jobs", type=int, default=2000, help="jobs for the queue-only run (0: skip)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        url = args.runner_url
        if url is None:
            settings = Settings(profile="minilm", runners={"embed_url": f"http://127.0.0.1:{free_port()}"})
            specs = runner_specs(settings)
            stack.enter_context(running(specs, log_dir=Path(tmp) / "logs"))
            url = specs[0].url
        cluster = stack.enter_context(running_postgres(durable=True))
        counts = [int(n) for n in args.workers.split(",")]
        results = [asyncio.run(drain(cluster, url, n, args.jobs, args.docs, Path(tmp))) for n in counts]
        queue = [asyncio.run(queue_only(cluster, n, args.queue_jobs)) for n in counts] if args.queue_jobs else []
    if args.json:
        print(json.dumps({"workers": results, "queue_only": queue}, indent=2))
        return
    print(f"{'workers':>7} {'jobs':>5} {'seconds':>8} {'jobs/s':>7}  {'job s p50':>9} {'job s max':>9}  jobs by worker")
    for r in results:
        print(f"{r['workers']:>7} {r['jobs']:>5} {r['seconds']:>8} {r['jobs_per_s']:>7}  {r['job_s_p50']:>9} "
              f"{r['job_s_max']:>9}  {r['jobs_by_worker']}")
    for r in queue:
        print(f"queue only: {r['processes']} processes, {r['jobs']} jobs in {r['seconds']} s: {r['jobs_per_s']} jobs/s")


if __name__ == "__main__":
    main()
