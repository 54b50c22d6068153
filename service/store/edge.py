"""The embedded store: Qdrant Edge (``qdrant-edge-py``), Qdrant's own Rust engine inside this process.

Layout under the store folder (``<data dir>/qdrant`` by default)::

    ragserve-store.json             marker: layout and engine versions (service/store/layout.py; a folder
                                    without it is not ours: refused, never touched)
    .lock                           held (flock) by the one process that has the store open
    collections/<name>/collection.json   dimensions, model, filter fields, BM25 settings; the shard folder
                                         served, where a background build swapped in another ("shard": "shard-3")
    collections/<name>/shard/            one EdgeShard: segments + write-ahead log (or shard-<n>/)

Concurrency. The Edge binding holds the GIL for the whole of each call, so a long call freezes every
Python thread, the event loop included. Hence:

- every engine call runs in a small thread pool, bounded by a semaphore with a timeout (nothing queues
  without bound, and the event loop itself never runs engine code);
- each call is kept short: upserts go in slices of ``write_batch`` points (a few milliseconds each), so
  other requests and heartbeats run between slices;
- one writer at a time per shard (an ``asyncio.Lock``), readers never wait for writers;
- ``optimize()`` (the HNSW build, the int8 quantization, or both: seconds to minutes with the GIL held) never
  runs in a serving process: a background build (:mod:`service.store.edge_background`) runs it on a copy of the
  shard in a process of its own, and ``ragserve optimize [--int8 | --hnsw-int8]`` runs it in its own process while
  the store is closed.

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
import re
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from service.deadline import Deadline, acquire_within, within
from service.sparse.config import SparseConfig, SparseStats
from service.store import snapshots
from service.store.atomic import write_json as _write_json
from service.store.base import VectorStore, check_vectors
from service.store.edge_background import Builds, is_shard_folder, remove_leftovers
from service.store.edge_convert import _rows, _stored, to_edge
from service.store.edge_shard import (
    _Collection,
    _config,
    _create_shard,
    _drop,
    _flush_and_close,
    _idf_params,
    _tenant_index,
    _upsert,
    collection_meta,
    search_pool_size,
)
from service.store.edge_space import (
    NEW_SHARD_BYTES,
    NO_SPACE,
    SMALL_WRITE_BYTES,
    WRITE_COPIES,
    _allocated_bytes,
    _reason,
    _write_bytes,
    check_free_space,
)
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
    QUANTIZATIONS,
    SPARSE,
    Chunk,
    CollectionInfo,
    DocState,
    Filter,
    Fusion,
    Hit,
    HitRow,
    SparseVector,
    StateCollector,
    StoredPoint,
)

log = logging.getLogger("ragserve.store")
T = TypeVar("T")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,63}$")


class EdgeStore(VectorStore):
    backend = "edge"
    quantizations = QUANTIZATIONS

    def __init__(self, root: Path, *, max_concurrency: int = 8, timeout_s: float = 10.0, threads: int = 2,
                 search_threads: int = 0, write_batch: int = 128, hnsw_ef: int = 512, int8_oversampling: float = 2.0,
                 min_free_bytes: int = 64 << 20, inline: bool = False, background_build: bool = False,
                 build_threshold: int = 20_000, build_nice: int = 10, build_hold: str | None = None,
                 build_overrides: dict[str, dict[str, Any]] | None = None, build_max_unindexed: int = 100_000,
                 build_segment_kb: int = 2048 << 10, quantization: str | None = None) -> None:
        """Use :meth:`open` (it takes the folder's lock and loads every collection). ``search_threads``: the
        engine's search pool per collection, 0 for :func:`search_pool_size`'s rule. ``background_build``: index a
        collection in the background once ``build_threshold`` of its points are unindexed, both overridden per
        collection by ``build_overrides`` (``{name: {"enabled": bool, "threshold": int}}``); while a build runs
        with ``build_max_unindexed`` points unindexed (0: never), writes wait for its swap; a build makes segments
        of at most ``build_segment_kb`` of dense vectors
        (:mod:`service.store.edge_background`; ``build_hold`` is for tests only). ``quantization``: what a
        collection created from now on records (one of :attr:`quantizations`, or ``None`` for float HNSW)."""
        if quantization is not None and quantization not in self.quantizations:
            raise ValueError(f"unknown quantization {quantization!r}")
        self._quantization = quantization
        self.root = root
        self._search_threads = search_threads or search_pool_size()
        self._inline = inline
        self._min_free = min_free_bytes
        self._slots = asyncio.Semaphore(max_concurrency)
        self._timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="qdrant-edge")
        self._write_batch = write_batch
        self._params = qe.SearchParams(hnsw_ef=hnsw_ef)
        # A quantized collection: without oversampling, rescoring only re-orders the int8 top-k (recall@10 0.94 at
        # 100k x 1024, full scan); with 2, the float vectors rescore twice as many.
        self._int8_params = qe.SearchParams(
            hnsw_ef=hnsw_ef, quantization=qe.QuantizationSearchParams(rescore=True, oversampling=int8_oversampling))
        self._sparse_params = _idf_params(None)
        self._collections: dict[str, _Collection] = {}
        self._create_lock = asyncio.Lock()
        self._lock_file: Any = None
        self._builds = Builds(self._run, self._run_unbounded, root=root, enabled=background_build,
                              threshold=build_threshold, nice=build_nice, min_free=min_free_bytes,
                              search_threads=self._search_threads, batch=write_batch,
                              hold=Path(build_hold) if build_hold else None, overrides=build_overrides,
                              max_unindexed=build_max_unindexed, segment_kb=build_segment_kb)

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
            active = str(meta.get("shard") or "shard")
            for leftover in remove_leftovers(folder, active):
                log.warning("removed %s/%s: an interrupted background build's", folder.name, leftover)
            # With a config, for the search pool's size (the engine stores it in the shard, so an open without it
            # keeps the last one); its vectors are the ones the shard was created with (the engine checks them),
            # and what is left None keeps what the shard has (its quantization, its optimizers).
            shard = qe.EdgeShard.load(str(folder / active), _config(
                info.dimensions, info.sparse is not None, search_threads=self._search_threads))
            self._collections[folder.name] = _Collection(info, shard, folder, shard_dir=active)

    async def aclose(self) -> None:
        """Flush and close every shard; on a disk below its reserve, close without flushing (the WAL holds
        every acknowledged write and replays it on the next load)."""
        loop = asyncio.get_running_loop()
        await self._builds.aclose()
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
                                        folder, _not_served(colls))
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

    async def _run_unbounded(self, name: str | None, fn: Callable[[], T]) -> T:
        """:meth:`_run` without its slot and deadline: for a background build's calls that grow with the shard
        (see :class:`~service.store.edge_background.Builds`), in the pool where the store is not inline."""
        if self._inline:
            return self._call(name, fn)
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: self._call(name, fn))

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
            info = CollectionInfo(name, dimensions, 0, model, dict(filter_fields or {}), sparse,
                                  quantization=self._quantization)
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
        return replace(coll.info, points=await self.count(name), index=await self._builds.status(coll))

    async def build_index(self, name: str) -> CollectionInfo:
        """Start a background build now, whatever the threshold or the switch say (an operator asked for it),
        where points are unindexed and none runs (:mod:`service.store.edge_background`)."""
        coll = self._get(name)
        info = await self.get_collection(name)
        if info.index is not None and info.index.unindexed > 0 and self._builds.job(coll) is None:
            self._builds.start(coll)
            return await self.get_collection(name)
        return info

    async def delete_collection(self, name: str) -> None:
        coll = self._get(name)
        async with coll.write_lock:
            if coll.closed:
                raise CollectionNotFound(name)
            coll.closed = True
            self._builds.forget(coll)
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
        await self._builds.room(coll)
        async with coll.write_lock:
            for start in range(0, len(chunks), step):
                end = start + step
                part = (chunks[start:end], vectors[start:end], sparse[start:end] if sparse is not None else None)
                self.check_space(_write_bytes(*part))
                await self._run(name, lambda part=part: _upsert(coll.shard, name, *part))
                self._builds.touched(coll, [c.id_in(name) for c in part[0]])
                self._builds.wrote(coll, len(part[0]))
        await self._builds.after_write(coll)

    async def delete(self, name: str, where: Filter) -> None:
        coll = self._get(name)
        op = qe.UpdateOperation.delete_points_by_filter(to_edge(where))
        async with coll.write_lock:
            self.check_space(SMALL_WRITE_BYTES)
            # During a build, the ids this delete matches are recorded so the built copy drops them too.
            matched = await self._ids(name, coll, where) if self._builds.job(coll) is not None else []
            await self._run(name, lambda: coll.shard.update(op))
            self._builds.touched(coll, matched)

    async def _ids(self, name: str, coll: _Collection, where: Filter, page_size: int = 2048) -> list[str]:
        flt = to_edge(where)
        ids: list[str] = []
        offset: Any = None
        while True:
            request = qe.ScrollRequest(offset=offset, limit=page_size, filter=flt, with_payload=False,
                                       with_vector=False)
            records, offset = await self._run(name, lambda request=request: coll.shard.scroll(request))
            ids.extend(str(r.id) for r in records)
            if offset is None:
                return ids

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
        dense_params = self._int8_params if coll.info.quantization in QUANTIZATIONS else self._params
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
        self.check_space(SMALL_WRITE_BYTES)
        async with coll.meta_lock:
            meta = collection_meta(info, coll.shard_dir)
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
        every build of the collection (in the background, or ``ragserve optimize``) builds its int8 copy (and the
        graph over it for ``hnsw-int8``). The copy
        itself is never built in this process: that holds the engine (and the GIL) for seconds to minutes, which no
        serving process may do."""
        if quantization not in self.quantizations:
            return await super().set_quantization(name, quantization)
        coll = self._get(name)
        if coll.info.quantization != quantization:  # a build under way builds what the old setting said
            self._builds.give_up(coll, "the collection's quantization changed during the build")
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
                self._builds.touched(coll, [pid for pid, _ in part])
                self._builds.wrote(coll, len(part))  # the engine moves a rewritten point out of its index
        await self._builds.after_write(coll)


def _not_served(colls: Sequence[_Collection]) -> Callable[[str, list[str]], list[str]]:
    """A copy's ``ignore``: the shard folders of these collections that are not served (a build's copy)."""
    served = {str(c.folder / c.shard_dir) for c in colls}
    folders = {str(c.folder) for c in colls}
    return lambda folder, names: [n for n in names if folder in folders and is_shard_folder(n)
                                  and f"{folder}/{n}" not in served]
