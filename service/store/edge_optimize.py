"""``ragserve optimize``: build a collection's HNSW graph or its int8 quantization, in a process of its own with
the store's lock held (the engine holds the GIL throughout, so never in a serving process)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from service.store.atomic import write_json as _write_json
from service.store.edge_shard import _config
from service.store.errors import CollectionNotFound
from service.store.layout import lock_store
from service.store.types import HNSW, HNSW_INT8, INT8, QUANTIZATIONS, SPARSE

INDEXING_THRESHOLD_KB = 1
"""The engine's indexing threshold as ``optimize_collection`` sets it: a segment is indexed (HNSW) or quantized
(int8) only above 1 KB of vectors, so every segment of any real size is, at once (there is no background optimizer
to act on the stored setting later; the engine's default, 10,000 KB, would leave 5,000 x 384 as it is)."""


HNSW_FLOATS_PER_S = 2400 * 384
"""The HNSW build, measured on 2 cores: about 2,400 points/s at 384 dims (40k in 16.5 s), slower in proportion
to the dimensions."""


INT8_FLOATS_PER_S = 7.5e6
"""The int8 quantization (no graph), measured on 2 busy cores (docs/store-benchmark.md): 13.4 s at 100k x 1024,
1.0 s at 10k x 1024."""


HNSW_INT8_FLOATS_PER_S = 3 * HNSW_FLOATS_PER_S
"""The graph over int8 copies, which the engine builds on int8 distances: 12.7 s against 37.7 for the float graph
at 100k x 1024 (docs/store-benchmark.md)."""


MODES: dict[str | None, tuple[str, float, str]] = {
    None: ("HNSW graph", HNSW_FLOATS_PER_S, "in HNSW segments"),
    INT8: ("int8 scalar quantization, a full scan without a graph", INT8_FLOATS_PER_S, "int8-quantized"),
    HNSW_INT8: ("int8 scalar quantization and an HNSW graph over it", HNSW_INT8_FLOATS_PER_S,
                "int8-quantized in HNSW segments"),
}
"""What an optimize builds, by quantization: its name, its speed (floats a second), what the points are after."""


def optimize_collection(root: Path, name: str, *, quantization: str | None = None,
                        progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Optimize one collection, in this process, with the store's lock held (never while serving: the engine
    holds the GIL throughout): build its HNSW graph, or with a ``quantization`` (or once the collection has one)
    quantize its dense vectors to int8, with no graph (``int8``: full scans) or a graph over them
    (``hnsw-int8``), record that in ``collection.json``, and from then on the store's dense searches on it
    oversample and rescore. The engine cannot drop a quantization once set, so a collection stays quantized
    (one mode may be switched for the other); segments built before converge to the config (an HNSW collection
    switched to int8 loses its graph). Points written afterwards go to an appendable segment, searched exactly
    until the next optimize."""
    import time

    lock = lock_store(root)
    try:
        folder = root / "collections" / name
        if not (folder / "collection.json").is_file():
            raise CollectionNotFound(name)
        meta = json.loads((folder / "collection.json").read_text())
        dims, has_sparse = int(meta["dimensions"]), bool(meta.get("sparse"))
        recorded = meta.get("quantization")
        if recorded in QUANTIZATIONS and quantization is None:
            quantization = recorded
            progress(f"{name!r} is {recorded}-quantized (its collection.json says so: `ragserve optimize` with "
                     f"--{recorded}, an import of such a collection, or RAGSERVE_QDRANT__EDGE_QUANTIZATION at its "
                     "creation recorded it), and stays quantized: the engine cannot remove a quantization. "
                     "For float HNSW, index into a new collection.")
        if quantization is not None and recorded != quantization:
            # Recorded before the shard's config changes: a collection.json that says int8 over a shard not yet
            # quantized only oversamples exact searches (harmless); the other way round would lose recall.
            meta["quantization"] = quantization
            _write_json(folder / "collection.json", meta)
        every_segment = qe.EdgeOptimizersConfig(indexing_threshold=INDEXING_THRESHOLD_KB)
        shard = qe.EdgeShard.load(str(folder / str(meta.get("shard") or "shard")),
                                  _config(dims, has_sparse, every_segment, quantization=quantization))
        try:
            points = shard.info().points_count
            what, rate, done = MODES[quantization]
            estimate = points * dims / rate
            progress(f"optimizing {name!r} ({what}): {points} points, {dims} dims; about {max(1, round(estimate))}s "
                     "(the store must stay closed meanwhile)")
            started = time.perf_counter()
            changed = shard.optimize()
            shard.flush()
            took = time.perf_counter() - started
            info = shard.info()
            points = info.points_count
            dense = _dense_indexed(shard, info.indexed_vectors_count, points, has_sparse)
        finally:
            shard.close()
        if changed:
            line = f"done in {took:.1f}s: {dense} of {points} points' dense vectors are {done} " \
                   f"({info.segments_count} segment(s))"
            if points > dense:
                line += f"; {points - dense} below the indexing threshold are searched exactly"
        elif points == 0:
            line = f"nothing to build: {name!r} is empty"
        elif dense >= points:
            line = f"nothing to do: all {points} points' dense vectors are already {done}"
        else:
            line = (f"nothing built: the engine indexes a segment only above {INDEXING_THRESHOLD_KB} KB of "
                    f"vectors, and the {points - dense} point(s) not yet indexed are below it; searches over "
                    "them stay exact")
        if quantization is not None:
            line += "; dense searches oversample by RAGSERVE_QDRANT__INT8_OVERSAMPLING (default 2) and rescore"
        progress(line)
        return {"mode": quantization or HNSW, "points": points, "seconds": took, "changed": changed,
                "indexed": dense, "segments": info.segments_count}
    finally:
        lock.close()


def _dense_indexed(shard: qe.EdgeShard, indexed_vectors: int, points: int, has_sparse: bool) -> int:
    """Dense vectors in indexed (HNSW or int8) segments: the engine's ``indexed_vectors_count`` also counts every
    sparse vector (their inverted index exists in every segment, the appendable one included)."""
    sparse = shard.count(qe.CountRequest(exact=True, filter=qe.Filter(must=[qe.HasVectorCondition(SPARSE)]))) \
        if has_sparse else 0
    return max(0, min(points, indexed_vectors - int(sparse)))
