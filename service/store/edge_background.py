"""Background index builds: the embedded store indexes a collection while it serves it.

Qdrant Edge has no background optimizer, and its ``optimize`` holds the GIL from start to end, so it cannot run in
the store's process. A build therefore copies the shard and builds the copy in a process of its own, then catches
the copy up with what was written meanwhile and swaps it in:

1. copy: with the collection's write lock held (writes wait, searches go on), flush the shard and copy its
   folder to ``collections/<name>/shard-<n>/``. From the job's start on, every write records the ids it touched
   (:meth:`Builds.touched`): the ids an upsert wrote, the ids a delete by filter matched (read before the delete),
   the ids whose sparse vector was rewritten. Ids only, so the journal stays small.
2. build: ``python -m service.store.edge_build`` (niced) indexes the copy and exits 0; the store awaits it without
   blocking its loop.
3. catch up: the built copy is loaded here, and each touched id is made equal to the live shard's point (copied
   with its vectors and payload, or deleted where the live shard no longer has it): in rounds without the lock,
   each taking the ids that the writes made during the one before touched, then, with the lock held, for the
   last few. A delete or a replacement made during the build is therefore kept: a point deleted in the live
   shard is deleted in the copy, whatever the copy held. The loop answers searches between batches.
4. swap: with the lock still held, tenant indexes created meanwhile are created on the copy,
   ``collection.json`` is rewritten (atomically) to name it, and the in-memory shard is switched; the old folder
   is deleted afterwards. ``collection.json`` is the commit point: after a crash, :func:`remove_leftovers` deletes
   every shard folder it does not name, so a restart serves the old shard or the new one, never a mix, and every
   acknowledged write is in whichever it names: the copy's catch-up is in its write-ahead log, as every write to
   the live shard is in the live one's, so neither is flushed at the swap.

What still holds searches during a build: the engine holds the GIL in every call (its binding never releases it),
so the live shard's flush before the copy, the copy's load and the old shard's close (which flushes it) hold the
store's loop for their length, in a thread or not. docs/store-benchmark.md has the figures.

A build is given up (its copy deleted, the reason in :class:`~service.store.types.IndexStatus`) when its builder
fails or is killed, the disk has no room for the copy, the collection is deleted, or its quantization changes.

Progress. Qdrant Edge's ``optimize`` is one call that reports nothing until it returns, so a running build's
progress and ETA are estimates (:func:`estimate`): the building step's elapsed time against its expected length,
the copy's unindexed points times their dimensions times the seconds per point-dimension that the last build of
this store took (before any, :data:`DEFAULT_COST_S`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from service.store.atomic import write_json
from service.store.edge_build import build_spec
from service.store.edge_optimize import _dense_indexed
from service.store.edge_shard import _Collection, _config, _tenant_index, collection_meta
from service.store.edge_space import WRITE_COPIES, _allocated_bytes, check_free_space
from service.store.errors import StoreFull
from service.store.files import copy_sparse
from service.store.types import SPARSE, IndexStatus

log = logging.getLogger("ragserve.store")
T = TypeVar("T")
Run = Callable[[str | None, Callable[[], T]], Awaitable[T]]

FIRST_SHARD = "shard"
"""The shard folder of a collection whose ``collection.json`` names none (every collection before its first
background build)."""
BUILD_PREFIX = "shard-"


def is_shard_folder(name: str) -> bool:
    return name == FIRST_SHARD or name.startswith(BUILD_PREFIX)


def remove_leftovers(folder: Path, active: str) -> list[str]:
    """Delete the shard folders of ``folder`` that ``collection.json`` does not name: a build interrupted before its
    swap, or the old shard of a swap interrupted before its deletion."""
    removed = []
    for p in sorted(folder.iterdir()):
        if p.is_dir() and is_shard_folder(p.name) and p.name != active:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p.name)
    return removed


DEFAULT_COST_S = 2.0e-6
"""Seconds of building per point per dimension before this store has timed a build: 100,000 points of 1024
dimensions built in 217 s on the 2-core test machine (docs/store-benchmark.md)."""
ALMOST_DONE = 0.99
"""The progress shown once the estimate has run out, and while the built copy catches up: never 1 before the swap."""


def estimate(phase: str, building_s: float, points: int, dimensions: int, cost_s: float) -> tuple[float, float | None]:
    """A running build's (progress, seconds left): nothing done, no ETA, while queued (the wait behind another
    build is unknown) or copying (the points are counted once the copy is made); then the building step's elapsed
    share of ``points * dimensions * cost_s``, held below 1 where the estimate ran out; and :data:`ALMOST_DONE`, no
    ETA, once built (catching up takes as long as the writes made meanwhile)."""
    expected = points * dimensions * cost_s
    if phase in ("queued", "copying"):
        return 0.0, None
    if phase == "building":
        share = building_s / expected if expected > 0 else 1.0
        return round(min(share, ALMOST_DONE), 3), round(max(expected - building_s, 0.0), 1)
    return ALMOST_DONE, None


CATCH_UP_ROUNDS = 8
"""At most this many rounds of catching up without the write lock (:meth:`Builds._swap`): where writes outpace the
catch-up, the last round, with the lock, takes what is left and writes wait for it."""


class BuildGivenUp(Exception):
    """A build that will not be swapped in; its message is the reason the status shows."""


@dataclass(eq=False)
class BuildJob:
    coll: _Collection
    folder: Path
    quantization: str | None
    touched: set[str] = field(default_factory=set)
    phase: str = "copying"
    given_up: str | None = None
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None
    started: float = 0.0
    """The store's clock when the build started."""
    started_at: str = ""
    points: int = 0
    """Points in the copy (known once it is made)."""
    building_since: float | None = None
    waiting: int = 0
    """Writes waiting in :meth:`Builds.room` for this build to end."""
    live_indexed: int | None = None
    """Indexed points of the live shard when it was copied (it indexes nothing more while it serves, so its
    unindexed points are its points less these)."""
    written_at_copy: int = 0
    """The collection's written count (:meth:`Builds.wrote`) when it was copied: what the swap indexes."""

    def to_index(self) -> int:
        """The copy's unindexed points: what its build indexes (the segments already indexed are kept, or merged
        with their graph reused), so what its length is timed by."""
        return self.points - (self.live_indexed or 0)

    def take(self) -> list[str]:
        ids, self.touched = self.touched, set()
        return sorted(ids)


@dataclass
class BuildRecord:
    """The last build's outcome, per collection, for as long as the store is open."""

    failed: str | None = None
    failed_at_points: int = 0
    last_ended: str | None = None
    last_built: str | None = None
    last_points: int | None = None
    last_seconds: float | None = None


OOM_FIRST = 1000
"""The builder's ``oom_score_adj``: the kernel's largest, so it is the first process killed when the host runs
out of memory."""


def first_to_go(pid: int) -> None:
    """Linux: make the builder the out-of-memory killer's first choice. A host without swap that runs short then
    loses the build (given up: "killed by signal 9", the copy deleted), not a runner, the API or the store. Set
    from here as soon as it is spawned, before it loads anything: raising the score of a process of the same user
    needs no privilege."""
    with suppress(OSError):
        Path(f"/proc/{pid}/oom_score_adj").write_text(str(OOM_FIRST))


class Builds:
    """The background builds of one store. ``hold`` (tests only): while that file exists, a built copy waits
    before its catch-up, so that a test can write, delete and kill the store at that point."""

    def __init__(self, run: Run[Any], long_run: Run[Any], *, root: Path, enabled: bool, threshold: int, nice: int,
                 min_free: int, search_threads: int, batch: int, hold: Path | None = None,
                 max_unindexed: int, segment_kb: int, overrides: Mapping[str, Mapping[str, Any]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._run = run
        self._long_run = long_run
        """For the calls whose length grows with the shard (load, flush, close): no deadline, since a call cut off
        by one would go on in its thread over a folder the build then deletes."""
        self._one_at_a_time = asyncio.Semaphore(1)
        """Builds run one after the other: each needs a copy of its shard on disk and a builder's memory."""
        self._root = root
        self.enabled = enabled
        self._threshold = threshold
        self._nice = nice
        self._min_free = min_free
        self._search_threads = search_threads
        self._batch = batch
        self._max_unindexed = max_unindexed
        self._segment_kb = segment_kb
        self._hold = hold
        self._overrides = dict(overrides or {})
        """Per collection: ``enabled`` and ``threshold`` where they differ from the store's."""
        self._clock = clock
        self._cost_s = DEFAULT_COST_S
        """Seconds per point-dimension of the last build's building step (:func:`estimate`)."""
        self._jobs: dict[str, BuildJob] = {}
        self._records: dict[str, BuildRecord] = {}
        self._written: dict[str, int] = {}
        """Per collection, points written since the copy of its last build that swapped in (:meth:`wrote`)."""
        self._numbers = itertools.count(1)

    def enabled_for(self, name: str) -> bool:
        return bool(self._overrides.get(name, {}).get("enabled", self.enabled))

    def threshold_for(self, name: str) -> int:
        return int(self._overrides.get(name, {}).get("threshold") or self._threshold)

    # --- what the store's writes tell it ----------------------------------------------------------------

    def job(self, coll: _Collection) -> BuildJob | None:
        job = self._jobs.get(coll.info.name)
        return job if job is not None and job.coll is coll else None

    def touched(self, coll: _Collection, ids: Iterable[str]) -> None:
        """Record ids a write changed (call it after the write applied: see :meth:`_catch_up`)."""
        job = self.job(coll)
        if job is not None:
            job.touched.update(ids)

    def wrote(self, coll: _Collection, points: int) -> None:
        """Count points an upsert wrote or a vector rewrite moved. The engine's own count misses both kinds where
        they replace an indexed point: it writes the new one to the unindexed segment and still counts the old,
        deleted one as indexed, so a collection whose documents are replaced, or whose BM25 vectors are all
        re-encoded, would read as indexed while its searches scan it exactly, and no build would start.
        A point written twice counts twice (its collection's size bounds the sum); the count starts at 0 in
        each process, so a restart falls back to the engine's count until the next writes."""
        name = coll.info.name
        self._written[name] = self._written.get(name, 0) + points

    def _unindexed_written(self, name: str, points: int) -> int:
        """What :meth:`wrote` counted, bounded by the collection's ``points``: at least that many are unindexed."""
        return min(self._written.get(name, 0), points)

    def give_up(self, coll: _Collection, reason: str) -> None:
        job = self.job(coll)
        if job is None:
            return
        job.given_up = job.given_up or reason
        if job.process is not None and job.process.returncode is None:
            job.process.kill()

    def forget(self, coll: _Collection) -> None:
        """The collection was deleted: give its build up and drop its record."""
        self.give_up(coll, "the collection was deleted")
        self._records.pop(coll.info.name, None)
        self._written.pop(coll.info.name, None)

    async def room(self, coll: _Collection) -> None:
        """Before an upsert: wait while this collection's build runs with ``max_unindexed`` of its points unindexed.

        Points written during a build are searched exactly until the next one indexes them, so where writes
        outpace the builder (on 2 cores: about 2,500 points/s written against 1,100 indexed at 1024 dimensions)
        every search pays a longer scan. Holding writes here, before the write lock (the swap's last round
        needs it), bounds that scan, as Qdrant's ``prevent_unoptimized`` does for its server's optimizers.
        A build that ends in any way (swapped in, given up) lets the writes go."""
        name = coll.info.name
        while self._max_unindexed and (job := self.job(coll)) is not None and job.live_indexed is not None:
            points = (await self._run(name, lambda: _info_counts(coll.shard)))[0]
            if points - job.live_indexed < self._max_unindexed or job.task is None:
                return
            job.waiting += 1
            try:
                await asyncio.wait({job.task})  # not the task itself: a cancelled write must not cancel the build
            finally:
                job.waiting -= 1

    async def after_write(self, coll: _Collection) -> None:
        """Start a build when the collection's unindexed points reached the threshold and none runs."""
        name = coll.info.name
        if not self.enabled_for(name) or coll.closed or self.job(coll) is not None:
            return
        threshold = self.threshold_for(name)
        # First a bound from the shard's info alone (its indexed count also holds every sparse vector, at most
        # one per point): the exact count of sparse vectors is a scan, run only near the threshold.
        points, raw = await self._run(name, lambda: _info_counts(coll.shard))
        if max(points - raw + (points if coll.info.sparse is not None else 0),
               self._unindexed_written(name, points)) < threshold:
            return
        record = self._records.get(name)
        if record is not None and record.failed and points < record.failed_at_points + threshold:
            return  # failed at about this size: try again once as many points again came in
        points, indexed = await self._counts(coll)
        if points - indexed >= threshold:
            self.start(coll)

    def start(self, coll: _Collection) -> BuildJob:
        n = next(self._numbers)
        while (coll.folder / f"{BUILD_PREFIX}{n}").exists():
            n = next(self._numbers)
        job = BuildJob(coll, coll.folder / f"{BUILD_PREFIX}{n}", coll.info.quantization,
                       started=self._clock(), started_at=_now())
        self._jobs[coll.info.name] = job
        job.task = asyncio.get_running_loop().create_task(self._build(job))
        return job

    async def status(self, coll: _Collection) -> IndexStatus:
        points, indexed = await self._counts(coll)
        record = self._records.get(coll.info.name) or BuildRecord()
        job = self.job(coll)
        enabled = self.enabled_for(coll.info.name)
        state = "running" if job is not None else "failed" if record.failed else "idle" if enabled else "off"
        last = IndexStatus(indexed=indexed, unindexed=points - indexed, build=state, reason=record.failed,
                           last_ended=record.last_ended, last_built=record.last_built,
                           last_points=record.last_points, last_seconds=record.last_seconds)
        if job is None:
            return last
        since = job.building_since
        progress, eta = estimate(job.phase, self._clock() - since if since is not None else 0.0, job.to_index(),
                                 coll.info.dimensions, self._cost_s)
        return replace(last, phase=job.phase, started=job.started_at, progress=progress, eta_s=eta,
                       waiting_writes=job.waiting)

    async def aclose(self) -> None:
        """Give every build up (their copies deleted) and wait for them to end."""
        jobs = list(self._jobs.values())
        for job in jobs:
            self.give_up(job.coll, "the store closed")
        await asyncio.gather(*(j.task for j in jobs if j.task is not None), return_exceptions=True)

    # --- one build ---------------------------------------------------------------------------------------

    async def _counts(self, coll: _Collection) -> tuple[int, int]:
        sparse = coll.info.sparse is not None

        def counts() -> tuple[int, int]:
            info = coll.shard.info()
            return info.points_count, _dense_indexed(coll.shard, info.indexed_vectors_count, info.points_count,
                                                     sparse)
        points, indexed = await self._run(coll.info.name, counts)
        return points, min(indexed, points - self._unindexed_written(coll.info.name, points))

    async def _build(self, job: BuildJob) -> None:
        coll = job.coll
        name = coll.info.name
        record = self._records.setdefault(name, BuildRecord())
        try:
            job.phase = "queued"
            async with self._one_at_a_time:
                built = await self._copied_and_built(job)
            job.phase = "held"
            while self._hold is not None and self._hold.exists():
                self._check(job)
                await asyncio.sleep(0.02)
            await self._swap(job)
            record.failed = None
            record.last_ended = _now()
            record.last_built = built
            record.last_points = job.points
            record.last_seconds = round(self._clock() - job.started, 1)
        except Exception as exc:  # noqa: BLE001 - a build that fails leaves the store serving as it was
            reason = str(exc) if isinstance(exc, BuildGivenUp) else f"{type(exc).__name__}: {exc}"
            if not coll.closed:
                log.warning("background build of %s given up: %s", name, reason[:300])
                record.failed = reason[:500]
                # A failure (the builder, the disk) is retried once as many points again came in; a build given
                # up for a change (the quantization) starts again on the next write past the threshold.
                record.failed_at_points = 0 if job.given_up else (await self._counts(coll))[0]
        finally:
            if job.folder.name != coll.shard_dir:
                await asyncio.to_thread(shutil.rmtree, job.folder, True)
            if self._jobs.get(name) is job:  # last: a build reported ended has left nothing behind
                del self._jobs[name]

    async def _copied_and_built(self, job: BuildJob) -> str:
        self._check(job)
        job.phase = "copying"
        await self._copy(job)
        return await self._run_builder(job)

    def _check(self, job: BuildJob) -> None:
        if job.coll.closed:
            raise BuildGivenUp("the collection was deleted")
        if job.coll.info.quantization != job.quantization:
            job.given_up = job.given_up or "the collection's quantization changed during the build"
        if job.given_up:
            raise BuildGivenUp(job.given_up)

    async def _copy(self, job: BuildJob) -> None:
        coll = job.coll
        async with coll.write_lock:
            self._check(job)
            live = coll.folder / coll.shard_dir
            await self._long_run(coll.info.name, coll.shard.flush)
            need = await asyncio.to_thread(_allocated_bytes, [live])
            try:
                check_free_space(self._root, self._min_free, need)
            except StoreFull as exc:
                raise BuildGivenUp(f"no room for the build's copy of the shard: {exc.message}") from exc
            await asyncio.to_thread(shutil.copytree, live, job.folder, copy_function=copy_sparse)
            job.points, job.live_indexed = await self._counts(coll)
            job.written_at_copy = self._written.get(coll.info.name, 0)

    async def _run_builder(self, job: BuildJob) -> str:
        job.phase = "building"
        info = job.coll.info
        spec = build_spec(info.dimensions, info.sparse is not None, job.quantization, self._nice, self._segment_kb)
        job.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "service.store.edge_build", str(job.folder), json.dumps(spec),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        first_to_go(job.process.pid)
        job.building_since = self._clock()
        out, err = await job.process.communicate()
        self._check(job)
        if job.process.returncode == 0 and job.to_index():
            self._cost_s = (self._clock() - job.building_since) / (job.to_index() * info.dimensions)
        status = job.process.returncode
        if status != 0:
            how = f"was killed by signal {-status}" if status is not None and status < 0 else f"exited with {status}"
            last = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise BuildGivenUp(f"the builder process {how}: {last[0]}".rstrip(": "))
        return str(json.loads(out.decode().strip().splitlines()[-1])["built"])

    async def _swap(self, job: BuildJob) -> None:
        coll = job.coll
        name = coll.info.name
        job.phase = "catching up"
        config = _config(coll.info.dimensions, coll.info.sparse is not None, search_threads=self._search_threads)
        began = self._clock()
        new: qe.EdgeShard | None = await self._long_run(name, lambda: qe.EdgeShard.load(str(job.folder), config))
        assert new is not None
        loaded, rounds, caught = self._clock(), 0, 0
        try:
            # Round after round without the lock, each copying what the writes made during the one before touched:
            # the rest shrinks as long as catching up outpaces writing, and the last round, with the lock held
            # (writes wait, searches go on), has only what the last of these let in.
            while rounds < CATCH_UP_ROUNDS:
                ids = job.take()
                rounds, caught = rounds + 1, caught + len(ids)
                await self._catch_up(coll, new, ids)
                if len(job.touched) <= self._batch:
                    break
            async with coll.write_lock:
                locked = self._clock()
                self._check(job)
                ids = job.take()
                caught += len(ids)
                await self._catch_up(coll, new, ids)
                for f in sorted(coll.tenant_fields):
                    await self._run(name, lambda f=f: _tenant_index(new, f))
                old, old_dir = coll.shard, coll.shard_dir
                await self._point_to(coll, job.folder.name)
                coll.shard, new = new, None
                self._written[name] = max(self._written.get(name, 0) - job.written_at_copy, 0)
                held = self._clock() - locked
        finally:
            if new is not None:
                await self._long_run(name, new.close)
        log.info("background build of %s swapped in: copy loaded in %.1f s, %d ids caught up in %d+1 rounds, "
                 "%.1f s in all, writes held %.2f s", name, loaded - began, caught, rounds,
                 self._clock() - loaded, held)
        await self._long_run(name, old.close)
        await asyncio.to_thread(shutil.rmtree, coll.folder / old_dir, True)

    async def _point_to(self, coll: _Collection, shard_dir: str) -> None:
        """Name ``shard_dir`` in ``collection.json`` (the swap's commit point) with the settings as they are, and
        in ``coll``. Where the write fails after its rename (the folder's fsync), the old name is written back,
        so the file never names a copy that is then deleted."""
        path = coll.folder / "collection.json"
        async with coll.meta_lock:
            try:
                await self._long_run(coll.info.name, lambda: write_json(path, collection_meta(coll.info, shard_dir)))
            except BaseException:
                with suppress(Exception):
                    write_json(path, collection_meta(coll.info, coll.shard_dir))
                raise
            coll.shard_dir = shard_dir

    async def _catch_up(self, coll: _Collection, new: qe.EdgeShard, ids: list[str]) -> None:
        """Make each of ``ids`` in ``new`` what it is in the live shard. A write records its ids after it applied,
        so an id read here before a write applied is recorded again and copied in the next round."""
        name = coll.info.name
        for start in range(0, len(ids), self._batch):
            part = ids[start:start + self._batch]
            records = await self._run(name, lambda part=part: coll.shard.retrieve(part, True, True))
            live = {str(r.id) for r in records}
            gone = [i for i in part if i not in live]
            try:
                check_free_space(self._root, self._min_free, WRITE_COPIES * len(part) * (4 * coll.info.dimensions
                                                                                        + 4096))
            except StoreFull as exc:
                raise BuildGivenUp(f"no room to catch the build up: {exc.message}") from exc
            ops = [qe.UpdateOperation.upsert_points([qe.Point(r.id, _vectors(r), r.payload) for r in records])
                   ] if records else []
            if gone:
                ops.append(qe.UpdateOperation.delete_points(gone))
            for op in ops:
                await self._run(name, lambda op=op: new.update(op))
            # In the store's own process each engine call above ran on the loop's thread without giving it up:
            # here the searches (and writes) that came meanwhile are answered, one batch apart, not after the
            # whole catch-up (docs/store-benchmark.md, "The swap stall, mended").
            await asyncio.sleep(0)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _info_counts(shard: qe.EdgeShard) -> tuple[int, int]:
    info = shard.info()
    return info.points_count, info.indexed_vectors_count


def _vectors(record: Any) -> dict[str, Any]:
    vectors = dict(record.vector or {})
    if SPARSE in vectors and vectors[SPARSE] is not None:
        s = vectors[SPARSE]
        vectors[SPARSE] = qe.SparseVector(list(s.indices), list(s.values))
    return vectors
