"""Export and import throughput at the store level: a collection moved from the embedded store (Qdrant Edge behind
its process boundary, as the service runs it) to the server backend (qdrant-client's local mode, the stand-in for a
Qdrant server) and back, through a ``.ragserve.jsonl.gz`` file on disk.

    python -m tests.bench.bench_transfer [--chunks 100000] [--dims 1024] [--json out.json]

Data: ``--chunks`` points of random unit vectors (``--dims``) with BM25-shaped sparse vectors (40 terms each) and a
payload like an indexed chunk's (400 characters of text, a little metadata). Seeding is not timed. Each of the four
steps (export Edge, import server, export server, import Edge) is timed alone, from the first store call to the
last, and reported as points/s; the file's size is reported too. At the end the copy that came back is checked:
same point count, same top-10 ids for a dense query.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
from qdrant_client import AsyncQdrantClient

from service.profiles import EmbeddingModel
from service.sparse.config import SparseConfig
from service.store.base import VectorStore
from service.store.process import ProcessStore
from service.store.server import ServerStore
from service.store.types import Chunk, SparseVector
from service.transfer.exporter import start_export
from service.transfer.importer import Importer

SEED_BATCH = 512
PIECE = 1 << 20


async def seed(store: VectorStore, name: str, n: int, dims: int, model: str) -> None:
    rng = np.random.default_rng(0)
    await store.create_collection(name, dimensions=dims, model=model, sparse=SparseConfig(),
                                  filter_fields={"lang": "keyword"})
    for start in range(0, n, SEED_BATCH):
        count = min(SEED_BATCH, n - start)
        vectors = rng.standard_normal((count, dims)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        chunks = [Chunk(f"doc{i // 4}", i % 4, f"chunk {i} " + "lorem ipsum dolor sit amet " * 14,
                        {"lang": "en", "n": i}, content_hash=f"h{i // 4}", chunk_count=4, source="bench")
                  for i in range(start, start + count)]
        sparse = [SparseVector(sorted(rng.choice(30_000, 40, replace=False).tolist()),
                               rng.uniform(0.2, 3.0, 40).round(4).tolist()) for _ in range(count)]
        await store.upsert(name, chunks, vectors, sparse)


async def export_to(store: VectorStore, name: str, path: Path) -> float:
    started = time.perf_counter()
    with open(path, "wb") as f:  # noqa: ASYNC230 - the benchmark alone runs on this loop
        async for piece in await start_export(store, name):
            f.write(piece)
    return time.perf_counter() - started


async def import_from(store: VectorStore, name: str, path: Path, model: EmbeddingModel) -> float:
    async def pieces() -> AsyncIterator[bytes]:
        with open(path, "rb") as f:  # noqa: ASYNC230 - the benchmark alone runs on this loop
            while piece := f.read(PIECE):
                yield piece

    started = time.perf_counter()
    result = await Importer(store, model).run(name, pieces())
    took = time.perf_counter() - started
    assert result.stored == result.points, result
    return took


async def run(n: int, dims: int) -> dict[str, object]:
    model = EmbeddingModel("bench-model", dims, 512)
    query = np.random.default_rng(1).standard_normal(dims).astype(np.float32).tolist()
    with tempfile.TemporaryDirectory(prefix="bench-transfer-") as tmp:
        root = Path(tmp)
        edge = await ProcessStore.open(root / "edge")
        server = ServerStore(AsyncQdrantClient(location=":memory:"), timeout_s=600)
        try:
            t = time.perf_counter()
            await seed(edge, "kb", n, dims, model.name)
            seeded_s = time.perf_counter() - t
            steps = {
                "export edge": await export_to(edge, "kb", root / "edge.gz"),
                "import server": await import_from(server, "kb", root / "edge.gz", model),
                "export server": await export_to(server, "kb", root / "server.gz"),
                "import edge": await import_from(edge, "back", root / "server.gz", model),
            }
            size = (root / "edge.gz").stat().st_size
            same = ([h.doc_id for h in await edge.query("kb", dense=query, limit=10)]
                    == [h.doc_id for h in await edge.query("back", dense=query, limit=10)])
            back = await edge.count("back")
        finally:
            await edge.aclose()
            await server.aclose()
    rates = {step: round(n / seconds) for step, seconds in steps.items()}
    return {"chunks": n, "dims": dims, "seed_s": round(seeded_s, 1), "seconds": {k: round(v, 2) for k, v in steps.items()},
            "points_per_s": rates, "file_bytes": size, "bytes_per_point": round(size / n), "round_trip_count": back,
            "round_trip_same_top10": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=1024)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = asyncio.run(run(args.chunks, args.dims))
    print(f"{args.chunks} chunks x {args.dims} dims; file {report['file_bytes'] / 2**20:.1f} MiB "
          f"({report['bytes_per_point']} B/point); seeding {report['seed_s']} s (not timed below)")
    for step, seconds in report["seconds"].items():  # type: ignore[attr-defined]
        print(f"  {step:<14} {seconds:8.2f} s  {report['points_per_s'][step]:>8,} points/s")  # type: ignore[index]
    print(f"  round trip: {report['round_trip_count']} points back, same dense top-10: "
          f"{report['round_trip_same_top10']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
