"""The embedded store at scale while it serves: points loaded through the store's own process (as ``ragserve
serve`` runs it) with searches running, indexed by background builds, and searched before, during and after.

    python -m tests.bench.bench_served_build [--size 100000] [--dims 1024] [--threshold 20000] [--rate 4]
        [--queries 100] [--hnsw-ef 512] [--after-ef 256,768] [--max-unindexed 100000] [--segment-mb 2048]
        [--quantization none] [--idle-s 60] [--cycles 1] [--trickle 100] [--memory-limit-mib 0] [--reuse STORE_DIR]
        [--scifact ../shared/data/scifact] [--workdir DIR] [--json out.json]

Data: ``tests/bench/bench_store.py``'s synthetic set with its defaults and seed (Gaussian clusters plus as much
noise, BM25-shaped sparse vectors), ``--dims`` wide; cached under ``--workdir``. The vectors are precomputed and
written through ``ProcessStore.upsert`` in batches of 256, the write path of the API's store; the store builds
in the background once ``--threshold`` points are unindexed (``RAGSERVE_QDRANT__EDGE_BUILD_THRESHOLD``).

While it loads and builds, one search every ``1/--rate`` s goes to the store process, dense, sparse and hybrid in
turn, each labelled with what the store was doing (its collection status, read every second): ``loading``,
``building`` (a build running, the load over or not) or ``indexed``. Once the load ends the points still under
the threshold are built on demand (``build_index``, the admin route's call), so the whole collection ends indexed.

Then ``--cycles`` builds of a served, indexed collection, each against the same collection idle
(:func:`one_build`): the ratio of their p99s is issue 38's "p99 during the build against idle p99", the build's
own cost to searches, apart from the exact scan of points not yet indexed that any idle store pays too.
``--reuse DIR`` runs only those cycles, on the store folder an earlier run left.

After: the store process's peak RSS (and every builder's, sampled each second, with the part of it that is not
pages of mapped files, ``RssAnon``), with ``--memory-limit-mib`` the peak charge of the memory cgroup they ran
in; then the folder reopened in this process as ``EdgeStore`` and measured as ``bench_store`` measures
(``run_queries``: concurrency 1, CPU time of this process per call), and dense recall@10 against numpy's exact
top-10 (at ``--hnsw-ef``, and dense alone at each ``--after-ef``).

``--scifact``: SciFact's 5,183 abstracts as all-MiniLM-L6-v2 vectors (384 dimensions, embedded once and cached as
``bench_store`` does) and their BM25 vectors, with its test queries: recall on real vectors, where the synthetic
clusters may flatter a graph. Use a ``--threshold`` under its size, so that it is built in the background.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.bench import bench_store
from tests.bench.bench_store import BATCH, COLLECTION, Data, K, overlap, production_fusion, run_queries

MODES = ("dense", "sparse", "hybrid")
UPDATE = "bench-update"


def vm_kib(pid: int, field: str, table: str = "status") -> int:
    """``field`` (KiB) of ``/proc/PID/status``, or of another table of that form (``smaps_rollup``); 0 where the
    process is gone."""
    try:
        for line in Path(f"/proc/{pid}/{table}").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def pss_kib(pid: int) -> int:
    """Proportional set size: each resident page divided among the mappings that hold it. VmRSS counts a page once
    per mapping, and the builder maps the vectors of the segment it merges, and of the one it writes, twice each
    (``/proc/PID/smaps`` during a merge into a 500,000 x 1024 segment: 4,076 MiB of Rss and 2,038 of Pss on each
    matrix.dat, docs/store-benchmark.md). Summed over processes, Pss is the memory they hold, each page once."""
    return vm_kib(pid, "Pss", "smaps_rollup")


def memory_cgroup(pid: int, limit_mib: int) -> Path:
    """A memory cgroup of ``limit_mib`` for ``pid`` and the builders it starts (root only; cgroup v2, or v1's
    memory controller), as a container's memory limit would hold the store: the kernel then reclaims the pages of
    mapped files that VmRSS counts (the vectors, the builder's segments) before the cgroup's own memory runs out,
    and only memory it cannot reclaim would end in the OOM killer."""
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    if v2.exists() and "memory" in v2.read_text().split():
        group, limit = v2.parent / f"ragserve-bench-{pid}", "memory.max"
    else:
        group, limit = Path("/sys/fs/cgroup/memory") / f"ragserve-bench-{pid}", "memory.limit_in_bytes"
    group.mkdir()
    (group / limit).write_text(str(limit_mib << 20))
    (group / "cgroup.procs").write_text(str(pid))
    return group


def cgroup_figures(group: Path) -> dict[str, Any]:
    """The cgroup's peak charge (every page it was charged for: anon, mapped and cached files) and its OOM kills."""
    def read(*names: str) -> str:
        for name in names:
            if (group / name).exists():
                return (group / name).read_text()
        return ""
    peak = read("memory.peak", "memory.max_usage_in_bytes").strip()
    events = dict(line.split()[:2] for line in (read("memory.events") or read("memory.oom_control")).splitlines()
                  if len(line.split()) >= 2)
    return {"cgroup": str(group), "charged_peak_mib": round(int(peak or 0) / 2**20),
            "oom_kills": int(events.get("oom_kill", 0))}


def children(pid: int) -> list[int]:
    try:
        return [int(c) for t in os.listdir(f"/proc/{pid}/task")
                for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
    except OSError:
        return []


def exact_top(data: Data, nq: int) -> list[list[int]]:
    """Numpy's exact dense top-10 of the first ``nq`` queries, in blocks (1M x 1024 is 4 GB of float32)."""
    q = np.asarray(data.q[:nq], np.float32)
    best_s = np.full((nq, K), -np.inf, np.float32)
    best_i = np.zeros((nq, K), np.int64)
    for start in range(0, data.n, 65_536):
        block = np.asarray(data.x[start:start + 65_536], np.float32)
        s = q @ block.T
        top = np.argpartition(-s, K, axis=1)[:, :K] if s.shape[1] > K else np.argsort(-s, axis=1)
        cand_s = np.concatenate([best_s, np.take_along_axis(s, top, 1)], 1)
        cand_i = np.concatenate([best_i, top + start], 1)
        order = np.argsort(-cand_s, axis=1)[:, :K]
        best_s, best_i = np.take_along_axis(cand_s, order, 1), np.take_along_axis(cand_i, order, 1)
    return best_i.tolist()


class Watch:
    """What the store is doing, read every second; the searches label themselves with it."""

    def __init__(self, store: Any, pid: int) -> None:
        self.store, self.pid = store, pid
        self.state = "loading"
        self.loaded = False
        self.stage: str | None = None
        """Set by the bench for a window it times itself (:func:`one_build`): the label of the searches made in it."""
        self.timeline: list[dict[str, Any]] = []
        self.builder_peak_kib = 0
        self.together_peak_kib = 0
        """The store's process and its builder together, VmRSS sampled each second (the HWMs are per process)."""
        self.anon_peak_kib = {"store": 0, "builder": 0, "together": 0}
        """RssAnon, the same way: the part of VmRSS that is not pages of mapped files, so (with no swap) the part
        that the kernel cannot reclaim."""
        self.pss_peak_kib = {"store": 0, "builder": 0, "together": 0}
        """Pss (:func:`pss_kib`), the same way: the memory the two processes hold, a page counted once."""
        self.started = time.monotonic()

    def memory(self) -> dict[str, dict[str, int]]:
        """VmRSS, RssAnon and Pss (KiB) of the store's process and of its builder, read once (in a thread: a
        builder's smaps_rollup walks gigabytes of mappings, which must not stall the searches' timing)."""
        kinds = {"VmRSS": "rss", "RssAnon": "anon"}
        now = {k: {"store": vm_kib(self.pid, field), "builder": 0} for field, k in kinds.items()}
        now["pss"] = {"store": pss_kib(self.pid), "builder": 0}
        for child in children(self.pid):
            self.builder_peak_kib = max(self.builder_peak_kib, vm_kib(child, "VmHWM"))
            for field, k in kinds.items():
                now[k]["builder"] += vm_kib(child, field)
            now["pss"]["builder"] += pss_kib(child)
        for v in now.values():
            v["together"] = v["store"] + v["builder"]
        return now

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            info = await self.store.get_collection(COLLECTION)
            index = info.index
            self.state = "building" if index.build == "running" else "loading" if not self.loaded else "indexed"
            self.timeline.append({"t": round(time.monotonic() - self.started, 1), "points": info.points,
                                  "indexed": index.indexed, "unindexed": index.unindexed, "build": index.build,
                                  "phase": index.phase})
            now = await asyncio.to_thread(self.memory)
            self.together_peak_kib = max(self.together_peak_kib, now["rss"]["together"])
            self.anon_peak_kib = {k: max(v, now["anon"][k]) for k, v in self.anon_peak_kib.items()}
            self.pss_peak_kib = {k: max(v, now["pss"][k]) for k, v in self.pss_peak_kib.items()}
            self.timeline[-1].update({f"{kind}_mib": round(v["together"] / 1024) for kind, v in now.items()})
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass


async def searches(store: Any, data: Data, watch: Watch, rate: float, stop: asyncio.Event,
                   out: list[dict[str, Any]]) -> None:
    fusion, j = production_fusion(), 0
    while not stop.is_set():
        mode = MODES[j % 3]
        q = j % len(data.q)
        started, error = time.perf_counter(), None
        try:
            await store.query(COLLECTION, limit=K, dense=data.q[q].tolist() if mode != "sparse" else None,
                              sparse=data.query_sparse(q) if mode != "dense" else None,
                              fusion=fusion if mode == "hybrid" else None)
        except Exception as exc:  # noqa: BLE001 - a figure: every error is counted, none is expected
            error = type(exc).__name__
        out.append({"state": watch.stage or watch.state, "mode": mode, "ms": (time.perf_counter() - started) * 1000,
                    "error": error, "t": round(time.monotonic() - watch.started, 2)})
        j += 1
        try:
            await asyncio.wait_for(stop.wait(), 1 / rate)
        except TimeoutError:
            pass


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for state in dict.fromkeys(r["state"] for r in rows):
        for mode in MODES:
            ms = [r["ms"] for r in rows if r["state"] == state and r["mode"] == mode]
            if ms:
                out[f"{state}.{mode}"] = {"n": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 2),
                                          "p99_ms": round(float(np.percentile(ms, 99)), 2),
                                          "max_ms": round(max(ms), 2)}
    out["errors"] = sum(1 for r in rows if r["error"])
    out["longest_ms"] = round(max((r["ms"] for r in rows), default=0.0), 2)  # across every swap included
    return out


async def built(store: Any) -> None:
    """Until no build runs (the status is all there is to wait on)."""
    while True:
        if (await store.get_collection(COLLECTION)).index.build != "running":
            return
        await asyncio.sleep(1)


class Served:
    """The store's process watched, and searched at ``--rate``, from start to :meth:`stop`."""

    def __init__(self, store: Any, data: Data, args: argparse.Namespace) -> None:
        self.watch, self.rows, self._stop = Watch(store, store._process.pid), [], asyncio.Event()
        self.cgroup = memory_cgroup(self.watch.pid, args.memory_limit_mib) if args.memory_limit_mib else None
        self._tasks = [asyncio.create_task(self.watch.run(self._stop)),
                       asyncio.create_task(searches(store, data, self.watch, args.rate, self._stop, self.rows))]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def figures(self) -> dict[str, Any]:
        """What both runs report of the searches and the processes' memory."""
        return {**({"memory_limit": cgroup_figures(self.cgroup)} if self.cgroup else {}),
                "builder_peak_mib": round(self.watch.builder_peak_kib / 1024),
                "together_peak_mib": round(self.watch.together_peak_kib / 1024),
                "anon_peak_mib": {k: round(v / 1024) for k, v in self.watch.anon_peak_kib.items()},
                "pss_peak_mib": {k: round(v / 1024) for k, v in self.watch.pss_peak_kib.items()},
                "searches": summary(self.rows), "timeline": self.watch.timeline,
                "slowest": sorted(self.rows, key=lambda r: -r["ms"])[:50]}


async def open_served(root: Path, args: argparse.Namespace) -> Any:
    from service.store.proxy import ProcessStore
    from service.store.types import quantization_named

    return await ProcessStore.open(root, background_build=True, build_threshold=args.threshold,
                                   hnsw_ef=args.hnsw_ef, timeout_s=3600, build_max_unindexed=args.max_unindexed,
                                   build_segment_kb=args.segment_mb << 10,
                                   quantization=quantization_named(args.quantization))


async def served(data: Data, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    from service.sparse.config import SparseConfig

    store = await open_served(root, args)
    await store.create_collection(COLLECTION, dimensions=data.dim, model="bench", sparse=SparseConfig())
    watched = Served(store, data, args)
    watch = watched.watch
    started = time.perf_counter()
    for start in range(0, data.n, BATCH):
        end = min(start + BATCH, data.n)
        await store.upsert(COLLECTION, [data.chunk(i) for i in range(start, end)], data.x[start:end],
                           [data.doc_sparse(i) for i in range(start, end)])
        if (end // BATCH) % 100 == 0:
            print(f"  {end:,}/{data.n:,} points, {end / (time.perf_counter() - started):,.0f}/s, "
                  f"store {watch.state}", flush=True)
    load_s = time.perf_counter() - started
    watch.loaded = True
    await built(store)
    tail_started = time.perf_counter()
    if (await store.get_collection(COLLECTION)).index.unindexed:
        await store.build_index(COLLECTION)  # the points under the threshold: on demand, as an admin would
        await built(store)
    indexed_s, tail_s = time.perf_counter() - started, time.perf_counter() - tail_started
    await asyncio.sleep(args.idle_s)  # searches of the indexed collection, still served: the idle figures
    update = [await one_build(store, data, watch, args, c) for c in range(args.cycles)]
    await watched.stop()
    final = await store.get_collection(COLLECTION)
    store_peak_kib = vm_kib(watch.pid, "VmHWM")
    await store.aclose()
    return {"load_s": round(load_s, 1), "load_points_s": round(data.n / load_s), "tail_build_s": round(tail_s, 1), "indexed_after_s": round(indexed_s, 1),
            "final": {"points": final.points, "indexed": final.index.indexed, "unindexed": final.index.unindexed,
                      "last_seconds": final.index.last_seconds},
            "store_peak_mib": round(store_peak_kib / 1024), **watched.figures(),
            "one_build": update and {"cycles": update, **against_idle(watched.rows)}}


async def reserved(data: Data, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``--reuse``: the folder an earlier run left, indexed, served again: ``--idle-s`` of searches, then
    ``--cycles`` of :func:`one_build`."""
    store = await open_served(root, args)
    watched = Served(store, data, args)
    watched.watch.loaded, watched.watch.stage = True, "reopened"
    await asyncio.sleep(args.idle_s)
    cycles = [await one_build(store, data, watched.watch, args, c) for c in range(args.cycles)]
    await watched.stop()
    await store.aclose()
    return {"reused": str(root), "cycles": cycles, **against_idle(watched.rows), **watched.figures()}


def update_chunk(data: Data, i: int, cycle: int) -> Any:
    from service.store.types import Chunk

    return Chunk(f"u{cycle}-{i}", 0, f"update point {i}", {"set": data.meta["name"]}, content_hash="h0", source=UPDATE)


async def write_updates(store: Any, data: Data, start: int, end: int, cycle: int) -> None:
    for a in range(start, end, BATCH):
        b = min(a + BATCH, end)
        await store.upsert(COLLECTION, [update_chunk(data, i, cycle) for i in range(a, b)], data.x[a:b],
                           [data.doc_sparse(i) for i in range(a, b)])


async def one_build(store: Any, data: Data, watch: Watch, args: argparse.Namespace, cycle: int) -> dict[str, Any]:
    """One background build of a served, indexed collection, against the same collection idle.

    ``idle``: the collection as the build will find it, just under the threshold of points written since its
    last build (the first vectors again, as documents ``u<cycle>-<i>``), searched for ``--idle-s`` with nothing written
    and nothing built. ``build``: from the write that passes the threshold to the swap, with ``--trickle``
    points/s written meanwhile (caught up at the swap). ``after``: ``--idle-s`` more, the build's points indexed
    and the trickle's not. Then they are all deleted, so ``after()`` measures the collection as loaded."""
    from service.store.types import Filter, Match

    unindexed = (await store.get_collection(COLLECTION)).index.unindexed  # a cycle before leaves its trickle
    under = max(args.threshold - 1 - unindexed, 0) // BATCH * BATCH
    watch.stage = "update.writing"
    await write_updates(store, data, 0, under, cycle)
    watch.stage = "update.idle"
    await asyncio.sleep(args.idle_s)
    watch.stage, started, written = "update.build", time.perf_counter(), under
    while written < under + BATCH or (await store.get_collection(COLLECTION)).index.build == "running":
        await write_updates(store, data, written, written + BATCH, cycle)
        written += BATCH
        await asyncio.sleep(BATCH / args.trickle)
    build_s = time.perf_counter() - started
    info = await store.get_collection(COLLECTION)
    watch.stage = "update.after"
    await asyncio.sleep(args.idle_s)
    watch.stage = "update.deleting"
    await store.delete(COLLECTION, Filter(must=(Match("source", UPDATE),)))
    watch.stage = None
    return {"unindexed_before": unindexed + under, "written_during": written - under, "build_s": round(build_s, 1),
            "index": {"indexed": info.index.indexed, "unindexed": info.index.unindexed,
                      "last_built": info.index.last_built, "last_seconds": info.index.last_seconds}}


def against_idle(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """p99 during the build over p99 idle, per mode and over all three."""
    def p99(state: str, mode: str | None) -> float:
        ms = [r["ms"] for r in rows if r["state"] == state and mode in (None, r["mode"])]
        return float(np.percentile(ms, 99)) if ms else float("nan")
    return {"p99_ratio": {mode or "all": round(p99("update.build", mode) / p99("update.idle", mode), 2)
                          for mode in (*MODES, None)}}


async def after(data: Data, root: Path, args: argparse.Namespace, exact: list[list[int]]) -> dict[str, Any]:
    from service.store.edge import EdgeStore

    out: dict[str, Any] = {}
    for ef in [args.hnsw_ef] + [e for e in args.after_ef if e != args.hnsw_ef]:
        store = await EdgeStore.open(root, timeout_s=3600, hnsw_ef=ef)
        try:
            for mode in MODES if ef == args.hnsw_ef else ("dense",):
                result = await run_queries(store, data, mode, args.queries, production_fusion())
                ids = result.pop("ids")
                if mode == "dense":
                    result["recall@10"] = round(overlap(ids, exact), 4)
                out[mode if ef == args.hnsw_ef else f"dense@ef{ef}"] = result
        finally:
            await store.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=bench_store.DIM)
    parser.add_argument("--threshold", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=4.0, help="searches per second during the load and build")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--max-unindexed", type=int, default=100_000,
                        help="RAGSERVE_QDRANT__EDGE_BUILD_MAX_UNINDEXED (0: writes never wait for a build)")
    parser.add_argument("--segment-mb", type=int, default=2048, help="RAGSERVE_QDRANT__EDGE_BUILD_SEGMENT_MB")
    parser.add_argument("--quantization", choices=["none", "int8", "hnsw-int8"], default="none",
                        help="RAGSERVE_QDRANT__EDGE_QUANTIZATION: what the collection builds")
    parser.add_argument("--idle-s", type=float, default=60.0,
                        help="seconds of searches once all is indexed and nothing is written (the idle figures)")
    parser.add_argument("--cycles", type=int, default=1,
                        help="then this many builds of a threshold of new points, each against the collection idle")
    parser.add_argument("--reuse", type=Path, default=None,
                        help="the store folder of an earlier run (same data): serve it again for --cycles builds only")
    parser.add_argument("--memory-limit-mib", type=int, default=0,
                        help="serve the store's process and its builders in a memory cgroup of this size (root)")
    parser.add_argument("--trickle", type=float, default=100.0, help="points/s written during that build")
    parser.add_argument("--hnsw-ef", type=int, default=512)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--after-ef", default="", help="more hnsw_ef values to measure dense search at, after")
    parser.add_argument("--scifact", type=Path, default=None,
                        help="load SciFact's MiniLM vectors (bench_store's --scifact set) instead of the synthetic set")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.after_ef = [int(e) for e in args.after_ef.split(",") if e]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-served-build-"))
    data_dir = work / ("scifact" if args.scifact else f"synthetic-{args.size}-{args.dims}")
    if not (data_dir / "meta.json").exists():
        if args.scifact:
            bench_store.make_scifact(data_dir, args.scifact)
        else:
            bench_store.DIM = args.dims  # make_synthetic draws DIM-wide centres
            bench_store.make_synthetic(data_dir, args.size, args.queries, args.seed)
    data = Data(data_dir)
    args.queries = min(args.queries, len(data.q))
    root = work / f"store-{time.strftime('%Y%m%dT%H%M%S')}"
    result = {"size": data.n, "dims": data.dim, "threshold": args.threshold, "hnsw_ef": args.hnsw_ef,
              "max_unindexed": args.max_unindexed, "segment_mb": args.segment_mb, "quantization": args.quantization,
              "rate": args.rate, "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()[0]}
    if args.reuse:
        result["reserved"] = s = asyncio.run(reserved(data, args.reuse, args))
    else:
        exact = exact_top(data, args.queries)
        result["served"] = s = asyncio.run(served(data, root, args))
        result["after"] = asyncio.run(after(data, root, args, exact))
    print(json.dumps({k: v for k, v in s.items() if k not in ("timeline", "slowest")}, indent=1))
    if "after" in result:
        print(json.dumps(result["after"], indent=1))
    result["loadavg_end"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
