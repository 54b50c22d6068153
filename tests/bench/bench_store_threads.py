"""The engine's search pool: CPU and time of one dense search for each pool size (``qdrant.edge_search_threads``).

    python -m tests.bench.bench_store_threads [--searches 1000] [--shapes 500x1024,2000x384,20000x384]

For each shape (points x dimensions, random vectors, a short payload as ragserve stores one) a shard is created
and loaded with each pool size in turn: the engine's own default (no size given: it derives one from the CPU
count, 8 threads on the 2-core development machine), then 1 and 2. Each loaded shard answers 50 searches of
warm-up, then ``--searches`` searches in sequence, as the store's process calls the engine (one call at a time:
the binding holds the GIL). Reported per search: this process's CPU (every thread, the pool's included), the
calling thread's CPU, and the wall time. Which result is ranked first is printed too: it must not change.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import qdrant_edge as qe

POOLS: tuple[int | None, ...] = (None, 1, 2)


def _shard(folder: Path, vectors: np.ndarray, pool: int | None) -> None:
    dims = vectors.shape[1]
    config = qe.EdgeConfig(vectors={"dense": qe.EdgeVectorParams(size=dims, distance=qe.Distance.Cosine)},
                           max_search_threads=pool)
    shard = qe.EdgeShard.create(str(folder), config)
    for start in range(0, len(vectors), 256):
        points = [qe.Point(i, {"dense": vectors[i].tolist()}, {"text": f"note {i}", "doc_id": f"d{i}"})
                  for i in range(start, min(len(vectors), start + 256))]
        shard.update(qe.UpdateOperation.upsert_points(points))
    shard.flush()
    shard.close()


def measure(points: int, dims: int, searches: int) -> list[dict[str, float | int | str]]:
    vectors = np.random.default_rng(0).standard_normal((points, dims)).astype(np.float32)
    rows: list[dict[str, float | int | str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for pool in POOLS:
            folder = Path(tmp) / f"pool-{pool}"
            _shard(folder, vectors, pool)
            shard = qe.EdgeShard.load(str(folder))
            request = qe.QueryRequest(limit=10, query=qe.Query.Nearest(vectors[7].tolist(), using="dense"),
                                      filter=None, with_payload=True, params=qe.SearchParams(hnsw_ef=256))
            try:
                for _ in range(50):
                    hits = shard.query(request)
                cpu, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
                for _ in range(searches):
                    hits = shard.query(request)
                rows.append({"shape": f"{points}x{dims}", "pool": "engine default" if pool is None else pool,
                             "cpu_us": (time.process_time() - cpu) / searches * 1e6,
                             "caller_us": (time.thread_time() - thread) / searches * 1e6,
                             "wall_us": (time.perf_counter() - wall) / searches * 1e6,
                             "threads": len(os.listdir("/proc/self/task")), "first": int(hits[0].id)})
            finally:
                shard.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--searches", type=int, default=1000)
    parser.add_argument("--shapes", default="500x1024,2000x384,20000x384")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.1f}")
    print(f"{'shape':>11s} {'pool':>15s} {'CPU us':>8s} {'caller us':>9s} {'wall us':>8s} {'threads':>7s} first")
    for shape in args.shapes.split(","):
        points, dims = (int(x) for x in shape.split("x"))
        for r in measure(points, dims, args.searches):
            print(f"{r['shape']:>11s} {r['pool']!s:>15s} {r['cpu_us']:8.1f} {r['caller_us']:9.1f} "
                  f"{r['wall_us']:8.1f} {r['threads']:7d} {r['first']}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
