"""The embedded store: Qdrant Edge (``qdrant-edge-py``), Qdrant's own Rust engine inside this process.

Layout under the store folder (``<data dir>/qdrant`` by default)::

    ragserve-store.json             marker: layout and engine versions (service/store/layout.py; a folder
                                    without it is not ours: refused, never touched)
    .lock                           held (flock) by the one process that has the store open
    collections/<name>/collection.json   dimensions, model, filter fields, BM25 settings
    collections/<name>/shard/            one EdgeShard: segments + write-ahead log

Concurrency. The Edge binding holds the GIL for the whole of each call, so a long call freezes every
Python thread, the event loop included. Hence:

- every engine call runs in a small thread pool, bounded by a semaphore with a timeout (nothing queues
  without bound, and the event loop itself never runs engine code);
- each call is kept short: upserts go in slices of ``write_batch`` points (a few milliseconds each), so
  other requests and heartbeats run between slices;
- one writer at a time per shard (an ``asyncio.Lock``), readers never wait for writers;
- ``optimize()`` (the HNSW build or the int8 quantization, seconds to minutes with the GIL held) never runs in
  a serving process: ``ragserve optimize [--int8]`` runs it in its own process, and refuses while the store is
  open elsewhere.

Durability: the engine writes a WAL before it acknowledges an update, and replays it on load, so an
acknowledged write survives a SIGKILL; :meth:`EdgeStore.flush` (job end, shutdown) persists segments.

A full disk. The engine maps its files into memory (the WAL's 32 MB segments, the segments' storage), and a
write through a mapping that finds no free block is not an error the engine could return: the kernel sends
SIGBUS and the whole process dies, searches included (measured: a write on a full tmpfs ends the process with
exit status 135). So every write first checks the data disk: below ``min_free_bytes`` plus the size of what
it is about to write, it is refused with :class:`StoreFull` (507) and the engine is never called; searches go
on, and writes work again once space is freed. Opening the store needs the reserve free too (a shard's first
load writes out its WAL segments, about 46 MB): below it, start-up is refused with that message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import qdrant_edge as qe

from service.deadline import Deadline, acquire_within, within
from service.sparse.config import SparseConfig, SparseStats
from service.store import snapshots
from service.store.atomic import write_json as _write_json
from service.store.base import VectorStore, check_vectors
from service.store.errors import (
    CollectionExists,
    CollectionNotFound,
    StoreError,
    StoreFull,
    StoreTimeout,
)
from service.store.layout import ENGINE, MARKER, engine_version, lock_store
from service.store.types import (
    DENSE,
    INT8,
    INTERNAL_INDEXES,
    SPARSE,
    TENANT,
    Chunk,
    CollectionInfo,
    DocState,
    Filter,
    Fusion,
    HasId,
    Hit,
    HitRow,
    IsEmpty,
    Match,
    MatchAny,
    Range,
    SparseVector,
    StateCollector,
    StoredPoint,
    hit_row,
)

log = logging.getLogger("ragserve.store")
T = TypeVar("T")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,63}$")
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


class EdgeStore(VectorStore):
    backend = "edge"
    quantizations = frozenset({INT8})

    def __init__(self, root: Path, *, max_concurrency: int = 8, timeout_s: float = 10.0, threads: int = 2,
                 search_threads: int = 0, write_batch: int = 128, hnsw_ef: int = 256, int8_oversampling: float = 2.0,
                 min_free_bytes: int = 64 << 20, inline: bool = False) -> None:
        """Use :meth:`open` (it takes the folder's lock and loads every collection). ``search_threads``: the
        engine's search pool per collection, 0 for :func:`search_pool_size`'s rule."""
        self.root = root
        self._search_threads = search_threads or search_pool_size()
        self._inline = inline
        self._min_free = min_free_bytes
        self._slots = asyncio.Semaphore(max_concurrency)
        self._timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="qdrant-edge")
        self._write_batch = write_batch
        self._params = qe.SearchParams(hnsw_ef=hnsw_ef)
        # A collection quantized by ``ragserve optimize --int8``: without oversampling, rescoring only re-orders
        # the int8 top-k (recall@10 0.94 at 100k x 1024); with 2, the float vectors rescore twice as many.
        self._int8_params = qe.SearchParams(
            hnsw_ef=hnsw_ef, quantization=qe.QuantizationSearchParams(rescore=True, oversampling=int8_oversampling))
        self._sparse_params = _idf_params(None)
        self._collections: dict[str, _Collection] = {}
        self._create_lock = asyncio.Lock()
        self._lock_file: Any = None

    # --- opening and closing -------------------------------------------------------------------------

    @classmethod
    async def open(cls, root: Path, **kwargs: Any) -> EdgeStore:
        store = cls(root, **kwargs)
        await asyncio.to_thread(store._open_sync)
        return store

    def _open_sync(self) -> None:
        self._lock_file = lock_store(self.root)
        try:  # loading writes too (a shard's first load writes out its WAL segments): refuse, never SIGBUS
            self.check_space(0)
        except StoreFull:
            self._lock_file.close()
            self._lock_file = None
            raise
        for folder in sorted((self.root / "collections").iterdir()):
            meta_path = folder / "collection.json"
            if not meta_path.is_file():
                log.warning("ignoring %s: no collection.json (an interrupted create)", folder)
                continue
            meta = json.loads(meta_path.read_text())
            info = CollectionInfo.from_metadata(folder.name, int(meta["dimensions"]), 0, meta)
            # With a config, for the search pool's size (the engine stores it in the shard, so an open without it
            # keeps the last one); its vectors are the ones the shard was created with (the engine checks them),
            # and what is left None keeps what the shard has (its quantization, its optimizers).
            shard = qe.EdgeShard.load(str(folder / "shard"), _config(
                info.dimensions, info.sparse is not None, search_threads=self._search_threads))
            self._collections[folder.name] = _Collection(info, shard, folder)

    async def aclose(self) -> None:
        """Flush and close every shard; on a disk below its reserve, close without flushing (the WAL holds
        every acknowledged write and replays it on the next load)."""
        loop = asyncio.get_running_loop()
        for name in list(self._collections):
            coll = self._collections.pop(name)
            async with coll.write_lock:
                coll.closed = True
                try:
                    self.check_space(0)
                    await loop.run_in_executor(self._pool, _flush_and_close, coll.shard)
                except Exception as exc:  # noqa: BLE001 - a close must release the shard whatever happened
                    log.warning("closing %s without a flush: %s", name, getattr(exc, "message", str(exc))[:300])
                    with suppress(Exception):
                        await loop.run_in_executor(self._pool, coll.shard.close)
        self._pool.shutdown(wait=True)
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    async def flush(self) -> None:
        """Persist segments; skipped (with a warning) while the disk is below its reserve: the WAL already
        holds every acknowledged write and replays it on load."""
        for coll in list(self._collections.values()):
            async with coll.write_lock:
                if not coll.closed:
                    try:
                        self.check_space(0)
                    except StoreFull as exc:
                        log.warning("not flushing %s: %s", coll.info.name, exc.message)
                        return
                    await self._run(coll.info.name, coll.shard.flush)

    async def ping(self) -> bool:
        return self._lock_file is not None

    async def snapshot(self, name: str | None, dest: Path) -> snapshots.SnapshotInfo:
        """Flush and copy the collections' folders with every one of their write locks held (and no collection
        created meanwhile): the copy is of one instant, at which every write acknowledged before this call is in
        and every write is whole (a write holds its collection's lock from its first slice to its last). Searches
        go on throughout (they take no lock, and the copy runs in a thread); writes wait for the copy, not for the
        checksums, which are computed from the copy afterwards."""
        snapshots.check_location(dest, self.root)
        folder = await asyncio.to_thread(snapshots.staging, dest)
        try:
            async with self._create_lock, AsyncExitStack() as held:
                colls = [self._get(name)] if name is not None else [
                    c for _, c in sorted(self._collections.items()) if not c.closed]
                for coll in colls:  # in name order, as every caller that takes several would
                    await held.enter_async_context(coll.write_lock)
                counts: dict[str, int] = {}
                for coll in colls:
                    cname = coll.info.name
                    if coll.closed:  # deleted while this call waited for its lock
                        raise CollectionNotFound(cname)
                    await self._run(cname, coll.shard.flush)
                    counts[cname] = int(await self._run(
                        cname, lambda coll=coll: coll.shard.count(qe.CountRequest(exact=True))))
                need = await asyncio.to_thread(_allocated_bytes, [c.folder for c in colls])
                check_free_space(folder, self._min_free, need)
                await asyncio.to_thread(snapshots.copy_store_files, self.root, MARKER, [c.folder for c in colls],
                                        folder)
            engine = {"name": ENGINE, "version": engine_version()}
            return await asyncio.to_thread(snapshots.seal, folder, dest, backend=self.backend, engine=engine,
                                           counts=counts, marker=MARKER)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, folder, True)
            raise

    # --- engine calls ----------------------------------------------------------------------------------

    def check_writable(self, need_bytes: int = 0) -> None:
        self.check_space(need_bytes)

    def check_space(self, need_bytes: int) -> None:
        """:class:`StoreFull` unless the data disk has ``min_free_bytes`` + ``need_bytes`` free (see the module
        docstring: a write that finds the disk full would kill the process)."""
        check_free_space(self.root, self._min_free, need_bytes)

    def _get(self, name: str) -> _Collection:
        coll = self._collections.get(name)
        if coll is None or coll.closed:
            raise CollectionNotFound(name)
        return coll

    async def _run(self, name: str | None, fn: Callable[[], T]) -> T:
        """One engine call, its errors translated: a full disk is :class:`StoreFull` (507), the rest
        :class:`StoreError` (503).

        ``inline`` stores (the store's own process) call the engine on the loop's thread: the binding holds the
        GIL for the whole call, so a pool thread ran nothing in parallel there and only added two thread
        hand-offs to every call (and a timeout could only fire after the call had finished anyway). The others
        call it in the pool, bounded, within one deadline (slot wait included)."""
        if self._inline:
            return self._call(name, fn)
        return await self._in_pool(lambda: self._call(name, fn))

    def _call(self, name: str | None, fn: Callable[[], T]) -> T:
        """One engine call on this thread (the loop's, or a pool thread for :meth:`_run`), its errors translated."""
        try:
            return fn()
        except (StoreError, CollectionNotFound):
            raise
        except Exception as exc:  # the binding raises plain Exception with the engine's message
            raise self._translated(name, exc) from exc

    def _translated(self, name: str | None, exc: Exception) -> Exception:
        if name is not None and (name not in self._collections or self._collections[name].closed):
            return CollectionNotFound(name)
        reason = _reason(exc)
        if reason == NO_SPACE:
            return StoreFull(f"the embedded store cannot write: {reason}")
        return StoreError(f"the embedded store failed: {reason}")

    async def _in_pool(self, fn: Callable[[], T]) -> T:
        deadline = Deadline(self._timeout_s)
        try:
            await acquire_within(self._slots, deadline.remaining())
        except asyncio.TimeoutError as exc:
            raise StoreTimeout(f"the embedded store is saturated (no slot within {self._timeout_s:g}s)") from exc
        try:
            future = asyncio.get_running_loop().run_in_executor(self._pool, fn)
            return await within(future, deadline.remaining())
        except asyncio.TimeoutError as exc:
            raise StoreTimeout(f"the embedded store did not answer within {self._timeout_s:g}s") from exc
        finally:
            self._slots.release()

    # --- collections -----------------------------------------------------------------------------------

    async def create_collection(
        self, name: str, *, dimensions: int, model: str, filter_fields: dict[str, str] | None = None,
        sparse: SparseConfig | None = None,
    ) -> CollectionInfo:
        if not NAME_RE.match(name):
            raise ValueError(f"invalid collection name {name!r}")
        async with self._create_lock:
            if name in self._collections:
                raise CollectionExists(name)
            info = CollectionInfo(name, dimensions, 0, model, dict(filter_fields or {}), sparse)
            folder = self.root / "collections" / name
            self.check_space(NEW_SHARD_BYTES)
            shard = await self._run(None, lambda: _create_shard(folder, info, self._search_threads))
            self._collections[name] = _Collection(info, shard, folder)
            return info

    async def list_collections(self) -> list[CollectionInfo]:
        colls = [c for _, c in sorted(self._collections.items()) if not c.closed]
        counts = await self._run(None, lambda: [c.shard.info().points_count for c in colls])
        return [replace(c.info, points=n) for c, n in zip(colls, counts, strict=True)]

    async def describe(self, name: str) -> CollectionInfo:
        return self._get(name).info

    async def get_collection(self, name: str) -> CollectionInfo:
        coll = self._get(name)
        return replace(coll.info, points=await self.count(name))

    async def delete_collection(self, name: str) -> None:
        coll = self._get(name)
        async with coll.write_lock:
            if coll.closed:
                raise CollectionNotFound(name)
            coll.closed = True
            self._collections.pop(name, None)
            await asyncio.get_running_loop().run_in_executor(self._pool, _drop, coll)

    # --- points ----------------------------------------------------------------------------------------

    async def upsert(
        self, name: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
        sparse: Sequence[SparseVector | None] | None = None,
    ) -> None:
        check_vectors(chunks, vectors, sparse)
        coll = self._get(name)
        step = self._write_batch
        async with coll.write_lock:
            for start in range(0, len(chunks), step):
                end = start + step
                part = (chunks[start:end], vectors[start:end], sparse[start:end] if sparse is not None else None)
                self.check_space(_write_bytes(*part))
                await self._run(name, lambda part=part: _upsert(coll.shard, name, *part))

    async def delete(self, name: str, where: Filter) -> None:
        coll = self._get(name)
        op = qe.UpdateOperation.delete_points_by_filter(to_edge(where))
        async with coll.write_lock:
            self.check_space(SMALL_WRITE_BYTES)
            await self._run(name, lambda: coll.shard.update(op))

    async def scroll_states(self, name: str, where: Filter | None, page_size: int = 2048) -> dict[str, DocState]:
        coll = self._get(name)
        flt = to_edge(where) if where is not None else None
        states = StateCollector()
        offset: Any = None
        while True:
            request = qe.ScrollRequest(offset=offset, limit=page_size, filter=flt, with_payload=StateCollector.FIELDS,
                                       with_vector=False)
            records, offset = await self._run(name, lambda request=request: coll.shard.scroll(request))
            for r in records:
                states.add(r.payload)
            if offset is None:
                return states.states()

    async def read_chunks(self, name: str, where: Filter, *, limit: int) -> list[Hit]:
        coll = self._get(name)
        request = qe.ScrollRequest(limit=limit, filter=to_edge(where), with_payload=True, with_vector=False)
        records, _ = await self._run(name, lambda: coll.shard.scroll(request))
        return [Hit.from_payload(r.id, 0.0, r.payload) for r in records]

    async def engine_query(
        self, name: str, *, dense: Sequence[float] | None = None, sparse: SparseVector | None = None,
        limit: int, query_filter: Filter | None = None, fusion: Fusion | None = None,
        idf_corpus: Filter | None = None,
    ) -> list[Hit]:
        rows = await self.query_rows(name, dense=dense, sparse=sparse, limit=limit, query_filter=query_filter,
                                     fusion=fusion, idf_corpus=idf_corpus)
        return [Hit(*row) for row in rows]

    async def query_rows(
        self, name: str, *, dense: Sequence[float] | None = None, sparse: SparseVector | None = None,
        limit: int, query_filter: Filter | None = None, fusion: Fusion | None = None,
        idf_corpus: Filter | None = None,
    ) -> list[HitRow]:
        """:meth:`engine_query`'s hits as plain rows: what the store's process sends (:mod:`service.store.child`)."""
        search = self._search(name, dense, sparse, limit, query_filter, fusion, idf_corpus)
        return _rows(await self._run(name, search))

    def query_rows_now(
        self, name: str, *, dense: Sequence[float] | None = None, sparse: SparseVector | None = None,
        limit: int, query_filter: Filter | None = None, fusion: Fusion | None = None,
        idf_corpus: Filter | None = None,
    ) -> list[HitRow]:
        """:meth:`query_rows` on this thread, for an ``inline`` store (the store's own process): a search there
        waits for nothing, so its process answers it where the request is read, with no task of its own."""
        if not self._inline:
            raise RuntimeError("query_rows_now is for a store that calls its engine inline")
        search = self._search(name, dense, sparse, limit, query_filter, fusion, idf_corpus)
        return _rows(self._call(name, search))

    def _search(self, name: str, dense: Sequence[float] | None, sparse: SparseVector | None, limit: int,
                query_filter: Filter | None, fusion: Fusion | None,
                idf_corpus: Filter | None) -> Callable[[], list[qe.ScoredPoint]]:
        """The engine call of a query (its request built here, on the caller's thread)."""
        coll = self._get(name)
        flt = to_edge(query_filter) if query_filter is not None else None
        sparse_params = self._sparse_params if idf_corpus is None else _idf_params(idf_corpus)
        dense_params = self._int8_params if coll.info.quantization == INT8 else self._params
        request = self._request(dense, sparse, limit, flt, fusion, dense_params, sparse_params)
        return lambda: coll.shard.query(request)

    @property
    def inline(self) -> bool:
        """Whether engine calls run on the calling thread (see :meth:`_run`)."""
        return self._inline

    async def ensure_tenant_index(self, name: str, field: str) -> None:
        coll = self._get(name)
        if field in coll.tenant_fields:
            return
        async with coll.write_lock:
            await self._run(name, lambda: _tenant_index(coll.shard, field))
            coll.tenant_fields.add(field)

    @staticmethod
    def _request(dense: Sequence[float] | None, sparse: SparseVector | None, limit: int, flt: qe.Filter | None,
                 fusion: Fusion | None, dense_params: qe.SearchParams,
                 sparse_params: qe.SearchParams) -> qe.QueryRequest:
        dense_q = qe.Query.Nearest(list(dense), using=DENSE) if dense is not None else None
        sparse_q = (qe.Query.Nearest(qe.SparseVector(list(sparse.indices), list(sparse.values)), using=SPARSE)
                    if sparse is not None else None)
        if dense_q is not None and sparse_q is not None:
            fusion = fusion or Fusion()
            depth = fusion.prefetch_limit  # :meth:`VectorStore.query` sets it from its limit
            fused = (qe.Fusion.Dbsf() if fusion.method == "dbsf"
                     else qe.Fusion.Rrf(k=fusion.rrf_k, weights=[fusion.dense_weight, fusion.sparse_weight]))
            return qe.QueryRequest(
                limit=limit, query=fused, filter=flt, with_payload=True,
                prefetches=[qe.Prefetch(limit=depth, query=dense_q, filter=flt, params=dense_params),
                            qe.Prefetch(limit=depth, query=sparse_q, filter=flt, params=sparse_params)],
            )
        query = dense_q or sparse_q
        if query is None:
            raise ValueError("a dense or a sparse query vector is needed")
        return qe.QueryRequest(limit=limit, query=query, filter=flt, with_payload=True,
                               params=dense_params if dense_q is not None else sparse_params)

    async def count(self, name: str, where: Filter | None = None) -> int:
        coll = self._get(name)
        request = qe.CountRequest(exact=True, filter=to_edge(where) if where is not None else None)
        return int(await self._run(name, lambda: coll.shard.count(request)))

    async def set_sparse_settings(self, name: str, sparse: SparseConfig, stats: SparseStats) -> CollectionInfo:
        coll = self._get(name)
        return await self._save_info(coll, replace(coll.info, sparse=sparse, sparse_stats=stats))

    async def _save_info(self, coll: _Collection, info: CollectionInfo) -> CollectionInfo:
        """Write a collection's settings to its ``collection.json`` (atomically), then serve them."""
        meta = {"dimensions": info.dimensions, **info.metadata()}
        self.check_space(SMALL_WRITE_BYTES)
        await self._run(info.name, lambda: _write_json(coll.folder / "collection.json", meta))
        coll.info = info
        return info

    async def scroll_texts(self, name: str, page_size: int = 512) -> AsyncIterator[list[tuple[str, str]]]:
        coll = self._get(name)
        offset: Any = None
        while True:
            request = qe.ScrollRequest(offset=offset, limit=page_size, with_payload=["text"], with_vector=False)
            records, offset = await self._run(name, lambda request=request: coll.shard.scroll(request))
            yield [(str(r.id), str((r.payload or {}).get("text", ""))) for r in records]
            if offset is None:
                return

    async def export_points(self, name: str, page_size: int = 256) -> AsyncIterator[list[StoredPoint]]:
        coll = self._get(name)
        offset: Any = None
        while True:
            request = qe.ScrollRequest(offset=offset, limit=page_size, with_payload=True, with_vector=True)
            records, offset = await self._run(name, lambda request=request: coll.shard.scroll(request))
            yield [_stored(r) for r in records]
            if offset is None:
                return

    async def set_importing(self, name: str, export_id: str | None) -> CollectionInfo:
        coll = self._get(name)
        return await self._save_info(coll, replace(coll.info, importing=export_id))

    async def set_quantization(self, name: str, quantization: str) -> CollectionInfo:
        """Recorded in ``collection.json``, as ``ragserve optimize --int8`` records it before it quantizes: from
        now on dense searches oversample and rescore (exact over segments not yet quantized, so harmless), and
        every ``ragserve optimize`` of the collection builds its int8 copy. The copy itself is never built here:
        that holds the engine (and the GIL) for seconds to minutes, which no serving process may do."""
        if quantization not in self.quantizations:
            return await super().set_quantization(name, quantization)
        coll = self._get(name)
        return await self._save_info(coll, replace(coll.info, quantization=quantization))

    async def set_sparse_vectors(self, name: str, vectors: Sequence[tuple[str, SparseVector]]) -> None:
        coll = self._get(name)
        async with coll.write_lock:
            for start in range(0, len(vectors), self._write_batch):
                part = vectors[start:start + self._write_batch]
                op = qe.UpdateOperation.update_vectors([
                    qe.PointVectors(pid, {SPARSE: qe.SparseVector(list(v.indices), list(v.values))})
                    for pid, v in part
                ])
                self.check_space(WRITE_COPIES * sum(64 + 8 * len(v.indices) for _, v in part))
                await self._run(name, lambda op=op: coll.shard.update(op))


# --- helpers that run in the pool (plain functions: no event-loop state) -------------------------------


def _create_shard(folder: Path, info: CollectionInfo, search_threads: int) -> qe.EdgeShard:
    if folder.exists():  # an earlier create that never wrote collection.json: ours, and empty of meaning
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shard = qe.EdgeShard.create(str(folder / "shard"), _config(info.dimensions, info.sparse is not None,
                                                               search_threads=search_threads))
    indexes = {**INTERNAL_INDEXES, **{f"metadata.{k}": v for k, v in info.filter_fields.items()}}
    for key, kind in indexes.items():
        shard.update(qe.UpdateOperation.create_field_index(key, FIELD_TYPES[kind]))
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
        shard.update(qe.UpdateOperation.create_field_index(TENANT, FIELD_TYPES["keyword"]))


def search_pool_size(cores: int | None = None) -> int:
    """The engine's search pool per collection where the settings leave it to ragserve: 1 on a host of up to 4
    cores, else one thread per core.

    With a pool of 1 the engine searches on the calling thread. The store's engine calls hold its GIL, so its
    searches run one at a time and only a search's own segments could run in parallel; on a small host the
    API, the runners and the store already share the cores, and a pool's threads mostly wake and wait for each
    other. Measured on 2 cores (``python -m tests.bench.bench_store_threads``): the engine's default pool (8
    threads) spent 3.6x the CPU of one thread on 500 points of 1024 dimensions, 2.3x on 2,000 of 384, and took
    longer as well. Above 4 cores (not measured here) a large collection's segments are searched in parallel."""
    cores = cores or os.cpu_count() or 1
    return 1 if cores <= 4 else cores


def _config(dimensions: int, sparse: bool, optimizers: qe.EdgeOptimizersConfig | None = None, *,
            int8: bool = False, search_threads: int | None = None) -> qe.EdgeConfig:
    """The shard's config. On a load, what is left ``None`` keeps what the shard has stored (so a collection once
    set to int8 stays int8); ``int8`` sets scalar quantization, its int8 copy kept in RAM, with ``m=0``: no HNSW
    graph, so ``optimize`` builds only the quantized copy and a dense search is a full scan over it, rescored with
    the float vectors (the variant measured in docs/store-benchmark.md)."""
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dimensions, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)} if sparse else None,
        optimizers=optimizers,
        hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000) if int8 else None,
        quantization_config=(qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, memory=qe.Memory.Pinned)
                             if int8 else None),
        max_search_threads=search_threads,
    )


def _upsert(shard: qe.EdgeShard, name: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
            sparse: Sequence[SparseVector | None] | None) -> None:
    points = []
    for i, (c, v) in enumerate(zip(chunks, vectors, strict=True)):
        vector: dict[str, Any] = {DENSE: list(v)}
        s = sparse[i] if sparse is not None else None
        if s is not None:
            vector[SPARSE] = qe.SparseVector(list(s.indices), list(s.values))
        points.append(qe.Point(c.id_in(name), vector, c.payload()))
    shard.update(qe.UpdateOperation.upsert_points(points))


def _rows(points: Sequence[qe.ScoredPoint]) -> list[HitRow]:
    return [hit_row(p.id, p.score, p.payload) for p in points]


def _stored(record: Any) -> StoredPoint:
    vectors = record.vector or {}
    sparse = vectors.get(SPARSE)
    return StoredPoint(str(record.id), dict(record.payload or {}), vectors[DENSE],
                       SparseVector(list(sparse.indices), list(sparse.values)) if sparse is not None else None)


def check_free_space(root: Path, min_free: int, need_bytes: int) -> None:
    """:class:`StoreFull` unless the disk holding ``root`` has ``min_free`` + ``need_bytes`` bytes free."""
    try:
        st = os.statvfs(root)
    except OSError as exc:
        raise StoreError(f"the embedded store's folder cannot be read: {exc.strerror}") from exc
    free = st.f_bavail * st.f_frsize
    if free < min_free + need_bytes:
        raise StoreFull(
            f"the data disk is full: {free / 2**20:.1f} MiB free, and this write needs "
            f"{need_bytes / 2**20:.1f} MiB above the {min_free / 2**20:.0f} MiB the embedded store keeps "
            "in reserve (RAGSERVE_QDRANT__EDGE_MIN_FREE_MB). Nothing was written; searches go on, and writes "
            "work again once space is freed"
        )

NEW_SHARD_BYTES = 64 << 20
"""What a new shard takes on disk (measured on tmpfs: 7.2 MB at once, then its first load writes out its WAL's
two 32 MB segments, from 8.7 to 55 MB), so that a new collection can still be opened after a restart."""
SMALL_WRITE_BYTES = 1 << 20
WRITE_COPIES = 3
"""A point is written about three times before its write returns: the WAL, the segment, the payload indexes."""


def _write_bytes(chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
                 sparse: Sequence[SparseVector | None] | None) -> int:
    """An upper estimate of the bytes one engine write of these points puts on the disk."""
    size = 0
    for i, c in enumerate(chunks):
        size += 256 + len(c.text.encode("utf-8")) + len(json.dumps(c.metadata, ensure_ascii=False, default=str))
        s = sparse[i] if sparse is not None else None
        size += 4 * len(vectors[i]) + (8 * len(s.indices) if s is not None else 0)
    return WRITE_COPIES * size


def _allocated_bytes(folders: Sequence[Path]) -> int:
    """What copies of these folders take on disk (without holes: ``service.store.files.copy_sparse``)."""
    return sum(p.stat().st_blocks * 512 for folder in folders for p in folder.rglob("*") if p.is_file())


def _flush_and_close(shard: qe.EdgeShard) -> None:
    shard.flush()
    shard.close()


def _drop(coll: _Collection) -> None:
    coll.shard.close()
    (coll.folder / "collection.json").unlink(missing_ok=True)  # first: a half-deleted folder is ignored
    shutil.rmtree(coll.folder, ignore_errors=True)


NO_SPACE = "no space left on the data disk"


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if "No space left" in text or "os error 28" in text:
        return NO_SPACE
    return text[:300]


def to_edge(flt: Filter) -> qe.Filter:
    def cond(c: Any) -> Any:
        if isinstance(c, Filter):
            return to_edge(c)
        if isinstance(c, Match):
            # The 0.9 binding tries int before bool, so a Python bool would match the integer 1, never a bool
            # payload; numpy's bool is not an integer and lands on the bool variant.
            value = np.bool_(c.value) if isinstance(c.value, bool) else c.value
            return qe.FieldCondition(key=c.key, match=qe.MatchValue(value))
        if isinstance(c, MatchAny):
            return qe.FieldCondition(key=c.key, match=qe.MatchAny(list(c.values)))
        if isinstance(c, Range):
            return qe.FieldCondition(key=c.key, range=qe.RangeFloat(gt=c.gt, gte=c.gte, lt=c.lt, lte=c.lte))
        if isinstance(c, IsEmpty):
            return qe.IsEmptyCondition(c.key)
        if isinstance(c, HasId):
            return qe.HasIdCondition(set(c.ids))
        raise TypeError(f"not a filter condition: {c!r}")

    return qe.Filter(
        must=[cond(c) for c in flt.must] or None,
        must_not=[cond(c) for c in flt.must_not] or None,
        should=[cond(c) for c in flt.should] or None,
    )


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


def optimize_collection(root: Path, name: str, *, int8: bool = False,
                        progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Optimize one collection, in this process, with the store's lock held (never while serving: the engine
    holds the GIL throughout): build its HNSW graph, or with ``int8`` (or once the collection is int8) quantize
    its dense vectors to int8 for full scans, record that in ``collection.json``, and from then on the store's
    dense searches on it oversample and rescore. The engine cannot drop a quantization once set, so a collection
    stays int8; segments built before converge to the config (an HNSW collection switched to int8 loses its
    graph). Points written afterwards go to an appendable segment, searched exactly until the next optimize."""
    import time

    lock = lock_store(root)
    try:
        folder = root / "collections" / name
        if not (folder / "collection.json").is_file():
            raise CollectionNotFound(name)
        meta = json.loads((folder / "collection.json").read_text())
        dims, has_sparse = int(meta["dimensions"]), bool(meta.get("sparse"))
        if meta.get("quantization") == INT8 and not int8:
            int8 = True
            progress(f"{name!r} is int8-quantized (its collection.json says so: `ragserve optimize {name} --int8`, "
                     "or an import of an int8 collection, recorded it), and stays so: the engine cannot remove a "
                     "quantization, and an HNSW graph over int8 vectors was never measured here. For HNSW without "
                     "int8, index into a new collection.")
        if int8 and meta.get("quantization") != INT8:
            # Recorded before the shard's config changes: a collection.json that says int8 over a shard not yet
            # quantized only oversamples exact searches (harmless); the other way round would lose recall.
            meta["quantization"] = INT8
            _write_json(folder / "collection.json", meta)
        every_segment = qe.EdgeOptimizersConfig(indexing_threshold=INDEXING_THRESHOLD_KB)
        shard = qe.EdgeShard.load(str(folder / "shard"), _config(dims, has_sparse, every_segment, int8=int8))
        try:
            points = shard.info().points_count
            what = "int8 scalar quantization, a full scan without a graph" if int8 else "HNSW graph"
            estimate = points * dims / (INT8_FLOATS_PER_S if int8 else HNSW_FLOATS_PER_S)
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
        done = "int8-quantized" if int8 else "in HNSW segments"
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
        if int8:
            line += "; dense searches oversample by RAGSERVE_QDRANT__INT8_OVERSAMPLING (default 2) and rescore"
        progress(line)
        return {"mode": INT8 if int8 else "hnsw", "points": points, "seconds": took, "changed": changed,
                "indexed": dense, "segments": info.segments_count}
    finally:
        lock.close()


def _dense_indexed(shard: qe.EdgeShard, indexed_vectors: int, points: int, has_sparse: bool) -> int:
    """Dense vectors in indexed (HNSW or int8) segments: the engine's ``indexed_vectors_count`` also counts every
    sparse vector (their inverted index exists in every segment, the appendable one included)."""
    sparse = shard.count(qe.CountRequest(exact=True, filter=qe.Filter(must=[qe.HasVectorCondition(SPARSE)]))) \
        if has_sparse else 0
    return max(0, min(points, indexed_vectors - int(sparse)))
