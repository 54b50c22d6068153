"""Export and import throughput at the store level: a collection moved from the embedded store (Qdrant Edge behind
its process boundary, as the service runs it) to the server backend (qdrant-client's local mode, the stand-in for a
Qdrant server) and back, through a ``.ragserve.jsonl.gz`` file on disk.

    python -m tests.bench.bench_transfer [--chunks 100000] [--dims 1024] [--json out.json]

Data: ``--chunks`` points of random unit vectors (``--dims``) with BM25-shaped sparse vectors (40 terms each) and a
payload like an indexed chunk's (400 characters of text, a little metadata). Seeding is not timed. Each of the four
steps (export Edge, import server, export server, import Edge) is timed alone, from the first store call to the
last, and reported as points/s; the file's size is reported too. No embedder exists in this process: the import
takes the model's name and dimensions from the file's header and calls no runner (zero embedding calls by
construction; the contract test tests/service/store/test_transfer.py checks the same through the API against a
runner's request counter).

Then ``--queries`` queries of each mode (dense, sparse, hybrid RRF) run on the original Edge collection, the
server's imported copy and the copy that came back to Edge; the top-10 (doc id, chunk index) lists must be equal,
in order. Last, a snapshot of the original Edge store (``VectorStore.snapshot``, through the store process, as the
API takes it) is timed and sized against the store folder (allocated bytes: the engine's files are sparse), then
restored into a new folder (checksums verified) and queried again: same count, same top-10 lists. Top-10 lists
are compared as groups of exactly equal scores (see ``ranked``): the engine orders ties arbitrarily.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
from qdrant_client import AsyncQdrantClient

from service.profiles import EmbeddingModel
from service.sparse.config import SparseConfig
from service.store.base import VectorStore
from service.store.proxy import ProcessStore
from service.store.qdrant_server import ServerStore
from service.store.snapshots import restore
from service.store.types import Chunk, Hit, SparseVector
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


def make_queries(n: int, dims: int) -> list[tuple[list[float], SparseVector]]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n):
        dense = rng.standard_normal(dims).astype(np.float32)
        terms = sorted(rng.choice(30_000, 4, replace=False).tolist())
        out.append(((dense / np.linalg.norm(dense)).tolist(), SparseVector(terms, [1.0] * len(terms))))
    return out


def ranked(hits: list[Hit], top: int = 10) -> list[tuple[tuple[str, int], ...] | int]:
    """The top ``top`` of ``hits`` (asked for one more) as groups of tied scores, best first, each group's
    (doc id, chunk index) pairs sorted: the engine orders exactly tied scores arbitrarily, even on one store for
    one query twice (RRF ties a point ranked r by dense only with one ranked r by BM25 only). Scores within 1e-6
    (relative) are tied: the server computes in float64 where Edge computes in float32. A group that goes on past
    the top (tied with the next hit) is given as how many of it are in the top."""
    groups: list[tuple[float, list[tuple[str, int]]]] = []
    for h in hits:
        if groups and abs(groups[-1][0] - h.score) <= 1e-6 * max(1.0, abs(h.score)):
            groups[-1][1].append((h.doc_id, h.chunk_index))
        else:
            groups.append((h.score, [(h.doc_id, h.chunk_index)]))
    out: list[tuple[tuple[str, int], ...] | int] = []
    seen = 0
    for _, members in groups:
        out.append(tuple(sorted(members)) if seen + len(members) <= top else top - seen)
        seen += len(members)
        if seen >= top:
            break
    return out


async def top10s(store: VectorStore, name: str, queries: list[tuple[list[float], SparseVector]]
                 ) -> dict[str, list[object]]:
    """Each mode's top 10 for every query, as :func:`ranked` gives it."""
    modes: dict[str, list[object]] = {"dense": [], "sparse": [], "hybrid": []}
    for dense, sparse in queries:
        for mode, kwargs in (("dense", {"dense": dense}), ("sparse", {"sparse": sparse}),
                             ("hybrid", {"dense": dense, "sparse": sparse})):
            modes[mode].append(ranked(await store.query(name, limit=11, **kwargs)))  # type: ignore[arg-type]
    return modes


def allocated(folder: Path) -> int:
    """Bytes the folder's files take on disk (holes excluded), as ``du`` counts them."""
    return sum(os.stat(p).st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def apparent(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


async def run(n: int, dims: int, n_queries: int) -> dict[str, object]:
    model = EmbeddingModel("bench-model", dims, 512)
    queries = make_queries(n_queries, dims)
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
            original = await top10s(edge, "kb", queries)
            on_server = await top10s(server, "kb", queries)
            came_back = await top10s(edge, "back", queries)
            counts = {"server": await server.count("kb"), "back": await edge.count("back")}

            store_alloc, store_apparent = allocated(root / "edge"), apparent(root / "edge")
            t = time.perf_counter()
            snap = await edge.snapshot(None, root / "snapshots" / "s1")
            snapshot_s = time.perf_counter() - t
            snapshot_alloc = allocated(snap.path)
        finally:
            await edge.aclose()
            await server.aclose()
        t = time.perf_counter()
        restore(snap.path, root / "restored")
        restore_s = time.perf_counter() - t
        restored = await ProcessStore.open(root / "restored")
        try:
            restored_counts = {"kb": await restored.count("kb"), "back": await restored.count("back")}
            from_snapshot = await top10s(restored, "kb", queries)
        finally:
            await restored.aclose()
    rates = {step: round(n / seconds) for step, seconds in steps.items()}
    same = {mode: {"server": on_server[mode] == original[mode], "back": came_back[mode] == original[mode],
                   "snapshot": from_snapshot[mode] == original[mode]} for mode in original}
    return {"chunks": n, "dims": dims, "queries": n_queries, "seed_s": round(seeded_s, 1),
            "seconds": {k: round(v, 2) for k, v in steps.items()}, "points_per_s": rates, "file_bytes": size,
            "bytes_per_point": round(size / n), "counts": counts, "same_top10": same,
            "snapshot": {"store_allocated_bytes": store_alloc, "store_apparent_bytes": store_apparent,
                         "snapshot_allocated_bytes": snapshot_alloc, "snapshot_s": round(snapshot_s, 2),
                         "restore_s": round(restore_s, 2), "files": snap.files,
                         "restored_counts": restored_counts}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = asyncio.run(run(args.chunks, args.dims, args.queries))
    print(f"{args.chunks} chunks x {args.dims} dims; file {report['file_bytes'] / 2**20:.1f} MiB "
          f"({report['bytes_per_point']} B/point); seeding {report['seed_s']} s (not timed below)")
    for step, seconds in report["seconds"].items():  # type: ignore[attr-defined]
        print(f"  {step:<14} {seconds:8.2f} s  {report['points_per_s'][step]:>8,} points/s")  # type: ignore[index]
    print(f"  counts after the moves: {report['counts']}")
    print(f"  same top-10 as the original, {args.queries} queries per mode: {report['same_top10']}")
    snap = report["snapshot"]
    print(f"  snapshot: store {snap['store_allocated_bytes'] / 2**20:.1f} MiB on disk "  # type: ignore[index]
          f"({snap['store_apparent_bytes'] / 2**20:.1f} MiB apparent), snapshot "  # type: ignore[index]
          f"{snap['snapshot_allocated_bytes'] / 2**20:.1f} MiB in {snap['snapshot_s']} s, "  # type: ignore[index]
          f"restore {snap['restore_s']} s, restored counts {snap['restored_counts']}")  # type: ignore[index]
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
