"""One Qdrant Edge shard per collection: its config, and the engine calls that create, fill, index and drop it.
The functions run in the store's thread pool (plain functions: no event-loop state)."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from service.store.atomic import write_json as _write_json
from service.store.edge_convert import to_edge
from service.store.types import (
    DENSE,
    INT8,
    INTERNAL_INDEXES,
    QUANTIZATIONS,
    SPARSE,
    TENANT,
    Chunk,
    CollectionInfo,
    Filter,
    SparseVector,
    dense_floats,
)

FIELD_TYPES = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "integer": qe.PayloadSchemaType.Integer,
    "float": qe.PayloadSchemaType.Float,
    "bool": qe.PayloadSchemaType.Bool,
    "datetime": qe.PayloadSchemaType.Datetime,
    "text": qe.PayloadSchemaType.Text,
}


@dataclass
class _Collection:
    info: CollectionInfo
    shard: qe.EdgeShard
    folder: Path
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: bool = False
    tenant_fields: set[str] = field(default_factory=set)
    """Fields known to have their ``is_tenant`` index (read from the shard on first use)."""
    shard_dir: str = "shard"
    """The folder of the shard being served: ``shard``, or the one a background build swapped in
    (:mod:`service.store.edge_background`), as ``collection.json`` names it."""
    meta_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while ``collection.json`` is written: a settings change (no write lock) and a build's swap both
    rewrite it, and neither may put back what the other just changed (the shard folder, the settings)."""


def collection_meta(info: CollectionInfo, shard_dir: str) -> dict[str, Any]:
    """What ``collection.json`` holds: the settings, and the shard folder where it is not the first one."""
    meta: dict[str, Any] = {"dimensions": info.dimensions, **info.metadata()}
    if shard_dir != "shard":
        meta["shard"] = shard_dir
    return meta


def _internal_index(kind: str) -> Any:
    """The params of a payload index every collection gets (:data:`INTERNAL_INDEXES`): memory-mapped
    (``Memory.Cold``), as the dense vectors are. They serve the write path (a replace or delete finds a document's
    chunks), not the ranking, and an index read into RAM is rebuilt in the process at every load: at 1M points the
    four of them were a third of a load's CPU (docs/background-builds.md, "Resources"), and a background build's swap
    makes that load while it holds the store's loop."""
    return {"keyword": qe.KeywordIndexParams}[kind](memory=qe.Memory.Cold)


def _create_shard(folder: Path, info: CollectionInfo, search_threads: int) -> qe.EdgeShard:
    if folder.exists():  # an earlier create that never wrote collection.json: ours, and empty of meaning
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shard = qe.EdgeShard.create(str(folder / "shard"), _config(info.dimensions, info.sparse is not None,
                                                               search_threads=search_threads))
    for key, kind in INTERNAL_INDEXES.items():
        shard.update(qe.UpdateOperation.create_field_index(key, _internal_index(kind)))
    for key, kind in info.filter_fields.items():
        shard.update(qe.UpdateOperation.create_field_index(f"metadata.{key}", FIELD_TYPES[kind]))
    shard.flush()
    _write_json(folder / "collection.json", {"dimensions": info.dimensions, **info.metadata()})
    return shard


def _idf_params(corpus: Filter | None) -> qe.SearchParams:
    # IDF over the live points: by default the engine counts deleted points until a vacuum rewrites the
    # segment (and Edge has no background optimizer), so a deleted document would skew BM25 forever. A
    # tenant's query counts its own tenant's points only (its ranking owes nothing to other tenants' data).
    live: list[Any] = [qe.HasVectorCondition(SPARSE)]
    if corpus is not None:
        live.append(to_edge(corpus))
    return qe.SearchParams(idf=qe.IdfParams(corpus=qe.Filter(must=live)))


def _tenant_index(shard: qe.EdgeShard, field: str) -> None:
    schema = shard.info().payload_schema
    if f"metadata.{field}" not in schema or not getattr(schema[f"metadata.{field}"].params, "is_tenant", False):
        shard.update(qe.UpdateOperation.create_field_index(f"metadata.{field}", qe.KeywordIndexParams(is_tenant=True)))
    if TENANT not in schema:
        shard.update(qe.UpdateOperation.create_field_index(TENANT, _internal_index(INTERNAL_INDEXES[TENANT])))


def search_pool_size(cores: int | None = None) -> int:
    """The engine's search pool per collection where the settings leave it to ragserve: 1 on a host of up to 4
    cores, else one thread per core.

    With a pool of 1 the engine searches on the calling thread. The store's engine calls hold its GIL, so its
    searches run one at a time and only a search's own segments could run in parallel; on a small host the
    API, the runners and the store already share the cores, and a pool's threads mostly wake and wait for each
    other: on 2 cores the engine's default pool spent several times the CPU of one thread and took longer as well
    (``python -m tests.bench.bench_store_threads``, docs/benchmarks.md). Above 4 cores (not measured here) a large
    collection's segments are searched in parallel."""
    cores = cores or os.cpu_count() or 1
    return 1 if cores <= 4 else cores


def _config(dimensions: int, sparse: bool, optimizers: qe.EdgeOptimizersConfig | None = None, *,
            quantization: str | None = None, search_threads: int | None = None) -> qe.EdgeConfig:
    """The shard's config. On a load, what is left ``None`` keeps what the shard has stored (so a quantized
    collection stays quantized). ``quantization``:

    - ``None``: what the shard has (a new shard: float vectors, the engine's HNSW graph: m 16, ef_construct 100);
    - :data:`INT8`: scalar int8 copies kept in RAM and ``m=0``: no graph, so ``optimize`` builds only the copies
      and a dense search is a full scan over them, rescored with the float vectors (docs/store-benchmark.md);
    - :data:`HNSW_INT8`: the same copies, and the engine's graph, which it builds and walks on int8 distances:
      a third of the float graph's build time, and a dense search reads a quarter of the bytes, rescoring its
      candidates with the float vectors (docs/store-benchmark.md, 1M x 1024).

    The graph's parameters are given in both quantized modes, so that a switch from one to the other rebuilds the
    segments (the engine compares the config it is given with each segment's).

    The dense vectors are memory-mapped without being read in at load (``on_disk``): the page cache keeps the ones
    searches touch, as fast as RAM once touched, and a load (a restart, a background build's swap) no longer
    reads the whole shard into the process (at 1M x 1024 the swap held two shards' vectors: 13.5 GB of RSS).
    A shard created before keeps its stored setting."""
    hnsw = (qe.HnswIndexConfig(m=0 if quantization == INT8 else 16, ef_construct=100, full_scan_threshold=10_000)
            if quantization in QUANTIZATIONS else None)
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dimensions, distance=qe.Distance.Cosine, on_disk=True)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)} if sparse else None,
        optimizers=optimizers,
        hnsw_config=hnsw,
        quantization_config=(qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, memory=qe.Memory.Pinned)
                             if quantization in QUANTIZATIONS else None),
        max_search_threads=search_threads,
    )


def _upsert(shard: qe.EdgeShard, name: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
            sparse: Sequence[SparseVector | None] | None) -> None:
    points = []
    for i, (c, v) in enumerate(zip(chunks, vectors, strict=True)):
        vector: dict[str, Any] = {DENSE: dense_floats(v)}
        s = sparse[i] if sparse is not None else None
        if s is not None:
            vector[SPARSE] = qe.SparseVector(list(s.indices), list(s.values))
        points.append(qe.Point(c.id_in(name), vector, c.payload()))
    shard.update(qe.UpdateOperation.upsert_points(points))


def _flush_and_close(shard: qe.EdgeShard) -> None:
    shard.flush()
    shard.close()


def _drop(coll: _Collection) -> None:
    coll.shard.close()
    (coll.folder / "collection.json").unlink(missing_ok=True)  # first: a half-deleted folder is ignored
    shutil.rmtree(coll.folder, ignore_errors=True)
