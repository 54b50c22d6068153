"""What a background index build costs the store's event loop (docs/background-builds.md).

    python -m tests.bench.bench_background_build [--points 20000] [--dims 64] [--seconds 25]

A store that calls the engine inline, as the store's child does, is filled to its build threshold; the write that
reaches it starts a build. Until the build ends (or, with builds off, for ``--seconds``), one search and one
one-point write run every 10 ms, and a heartbeat every 5 ms records how late the loop wakes it. Reported: the
longest stall seen in each phase of the build (as the collection's status named it when the stall ended), the
build's duration, the searches answered meanwhile, and the index counts at the end. Run it with builds on and
off on the same machine: the difference is the build's.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from service.store.edge import EdgeStore
from service.store.types import Chunk

BEAT_S = 0.005


async def measure(points: int, dims: int, *, build: bool, seconds: float, root: Path) -> dict[str, Any]:
    store = await EdgeStore.open(root, inline=True, background_build=build, build_threshold=points,
                                 write_batch=256)
    rng = np.random.default_rng(0)
    try:
        await store.create_collection("c", dimensions=dims, model="m")
        for start in range(0, points, 1000):
            end = min(points, start + 1000)
            await store.upsert("c", [Chunk(f"d{i}", 0, "t") for i in range(start, end)],
                               rng.standard_normal((end - start, dims)).tolist())
        phase = ["started"]
        stalls: dict[str, float] = {}
        done = asyncio.Event()

        async def beat() -> None:
            while not done.is_set():
                t = time.perf_counter()
                await asyncio.sleep(BEAT_S)
                late = time.perf_counter() - t - BEAT_S
                stalls[phase[0]] = max(stalls.get(phase[0], 0.0), late)

        heart = asyncio.create_task(beat())
        started = time.perf_counter()
        searches = 0
        while True:
            await store.engine_query("c", dense=rng.standard_normal(dims).tolist(), limit=10)
            searches += 1
            await store.upsert("c", [Chunk(f"w{searches}", 0, "t")], rng.standard_normal((1, dims)).tolist())
            index = (await store.get_collection("c")).index
            assert index is not None
            phase[0] = index.phase or index.build
            took = time.perf_counter() - started
            if (build and index.build != "running" and took > 1) or took > seconds:
                break
            await asyncio.sleep(0.01)
        done.set()
        await heart
        return {"points": points, "dims": dims, "build": build, "seconds": round(took, 1), "searches": searches,
                "indexed": index.indexed, "unindexed": index.unindexed, "last_built": index.last_built,
                "max_stall_ms": {k: round(v * 1000, 1) for k, v in stalls.items()}}
    finally:
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=20_000)
    parser.add_argument("--dims", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=25.0, help="how long the run without builds lasts")
    args = parser.parse_args()
    for build in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            print(asyncio.run(measure(args.points, args.dims, build=build, seconds=args.seconds if not build
                                      else 600.0, root=Path(tmp) / "qdrant")))


if __name__ == "__main__":
    main()
