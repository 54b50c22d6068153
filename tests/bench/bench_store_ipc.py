"""The store process's round trip: the same query against ProcessStore (the default, Edge in its own process)
and EdgeStore in this process, side by side on the same data (2,000 x 384, 600 queries each).

    python -m tests.bench.bench_store_ipc

Measured on a quiet machine (load average 1.4): p50 0.85 ms through the process, 0.50 ms in-process (+0.35 ms);
before messages up to 32 KiB were written from the event loop, +0.51 ms."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

from service.store.edge import EdgeStore
from service.store.proxy import ProcessStore
from service.store.types import Chunk


async def main() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as d2:
        out: dict[str, np.ndarray] = {}
        for name, opener, root in (("process", ProcessStore.open, d), ("in-process", EdgeStore.open, d2)):
            store = await opener(Path(root))
            await store.create_collection("c", dimensions=384, model="m")
            vecs = rng.standard_normal((2000, 384)).astype("float32")
            chunks = [Chunk(f"d{i}", 0, f"text {i} " * 20, {"k": i}) for i in range(2000)]
            for i in range(0, 2000, 200):
                await store.upsert("c", chunks[i:i+200], vecs[i:i+200].tolist())
            q = rng.standard_normal(384).astype("float32").tolist()
            for _ in range(50):  # warm-up
                await store.query("c", dense=q, limit=10)
            ts = []
            for _ in range(600):
                t = time.perf_counter()
                await store.query("c", dense=q, limit=10)
                ts.append(time.perf_counter() - t)
            out[name] = np.percentile(ts, [50, 90, 99]) * 1000
            await store.aclose()
        for k, v in out.items():
            print(f"{k:11s} query p50 {v[0]:.3f} ms  p90 {v[1]:.3f}  p99 {v[2]:.3f}")
        print(f"process - in-process at p50: {out['process'][0]-out['in-process'][0]:.3f} ms")


if __name__ == "__main__":
    asyncio.run(main())
