"""Background index builds in the embedded store (service/store/edge_background.py): a real store, a real builder
process, and a build held (``build_hold``) between its build and its catch-up, so that writes, replacements,
deletes and a SIGKILL land while it runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.sparse.config import SparseConfig
from service.store import snapshots
from service.store.base import VectorStore
from service.store.edge import EdgeStore
from service.store.edge_background import ALMOST_DONE, estimate
from service.store.edge_space import _allocated_bytes
from service.store.errors import StoreError
from service.store.proxy import ProcessStore
from service.store.types import Chunk, IndexStatus, SparseVector
from tests.support.waiting import until_async

DIMS = 16
THRESHOLD = 600


def doc(doc_id: str, chunks: int, version: str) -> list[Chunk]:
    return [Chunk(doc_id, i, f"{doc_id} {version} {i}", {"v": version, "n": i}, content_hash=version,
                  chunk_count=chunks) for i in range(chunks)]


def vectors_for(chunks: list[Chunk]) -> list[list[float]]:
    seed = abs(hash(tuple((c.doc_id, c.chunk_index, c.content_hash) for c in chunks))) % (1 << 32)
    return np.random.default_rng(seed).standard_normal((len(chunks), DIMS)).tolist()


def sparse_for(chunks: list[Chunk]) -> list[SparseVector | None]:
    return [SparseVector([c.chunk_index, 100 + len(c.doc_id)], [1.0, 0.5]) for c in chunks]


class Ledger:
    """The points every acknowledged write should have left: id -> payload."""

    def __init__(self, store: VectorStore, name: str = "c") -> None:
        self.store = store
        self.name = name
        self.points: dict[str, dict[str, Any]] = {}

    async def upsert(self, chunks: list[Chunk]) -> None:
        await self.store.upsert(self.name, chunks, vectors_for(chunks), sparse_for(chunks))
        self.points.update({c.id_in(self.name): c.payload() for c in chunks})

    async def replace(self, chunks: list[Chunk]) -> None:
        await self.store.replace_documents("c", chunks, vectors_for(chunks), sparse_for(chunks))
        doc_ids = {c.doc_id for c in chunks}
        self.points = {k: v for k, v in self.points.items() if v["doc_id"] not in doc_ids}
        self.points.update({c.id_in("c"): c.payload() for c in chunks})

    async def delete(self, doc_id: str) -> None:
        await self.store.delete_documents("c", [doc_id])
        self.points = {k: v for k, v in self.points.items() if v["doc_id"] != doc_id}

    async def check(self, store: VectorStore | None = None) -> dict[str, Any]:
        """Every point, compared id by id and payload by payload; the stored points, by id."""
        stored = {p.id: p async for page in (store or self.store).export_points(self.name) for p in page}
        assert {k: v.payload for k, v in stored.items()} == self.points
        return stored


async def status(store: VectorStore, name: str = "c") -> IndexStatus:
    info = await store.get_collection(name)
    assert info.index is not None
    return info.index


async def until(store: VectorStore, done: Callable[[IndexStatus], bool], timeout_s: float = 120.0,
                name: str = "c") -> IndexStatus:
    async with asyncio.timeout(timeout_s):
        while True:
            s = await status(store, name)
            if done(s):
                return s
            await asyncio.sleep(0.05)


async def answers(store: VectorStore) -> list[str]:
    hits = await store.engine_query("c", dense=[1.0] * DIMS, limit=5)
    assert len(hits) == 5
    return [h.doc_id for h in hits]


async def filled(store: VectorStore) -> Ledger:
    """A collection at its threshold: the write that reaches it starts a build, which the hold file stops."""
    await store.create_collection("c", dimensions=DIMS, model="m", sparse=SparseConfig())
    ledger = Ledger(store)
    for i in range(THRESHOLD // 5 - 1):
        await ledger.upsert(doc(f"d{i}", 5, "h1"))
    before = await status(store)
    assert (before.indexed, before.unindexed, before.build) == (0, THRESHOLD - 5, "idle")
    await ledger.upsert(doc(f"d{THRESHOLD // 5 - 1}", 5, "h1"))
    return ledger


RENORMALISED = SparseVector([7, 8], [0.25, 0.75])


async def write_during_the_build(ledger: Ledger) -> None:
    await ledger.upsert(doc("new-a", 3, "h1") + doc("new-b", 2, "h1"))
    await ledger.replace(doc("d5", 2, "h2"))  # 5 chunks before: chunks 2-4 deleted by filter, 0-1 rewritten
    await ledger.delete("d7")
    await ledger.upsert(doc("d9", 5, "h3"))  # same ids, new payloads
    await ledger.store.set_sparse_vectors("c", [(doc("d11", 5, "h1")[0].id_in("c"), RENORMALISED)])


def check_renormalised(stored: dict[str, Any]) -> None:
    assert stored[doc("d11", 5, "h1")[0].id_in("c")].sparse == RENORMALISED
    assert stored[doc("d11", 5, "h1")[1].id_in("c")].sparse == sparse_for(doc("d11", 5, "h1"))[1]


def open_edge(root: Path, hold: Path, **kw: Any) -> Awaitable[EdgeStore]:
    return EdgeStore.open(root, background_build=True, build_threshold=THRESHOLD, build_hold=str(hold),
                          write_batch=64, **kw)


def shard_folders(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "collections" / "c").iterdir() if p.is_dir())


async def test_writes_replacements_and_deletes_made_during_a_build_survive_its_swap(tmp_path: Path) -> None:
    root, hold = tmp_path / "qdrant", tmp_path / "hold"
    hold.touch()
    store = await open_edge(root, hold)
    try:
        ledger = await filled(store)
        held = await until(store, lambda s: s.phase == "held")
        assert held.build == "running" and held.indexed == 0  # the live shard is untouched by the build
        assert (held.progress, held.eta_s) == (ALMOST_DONE, None) and held.started is not None
        assert shard_folders(root) == ["shard", "shard-1"]
        during = await answers(store)
        await write_during_the_build(ledger)
        await store.ensure_tenant_index("c", "v")
        await ledger.check()  # the live shard has every write
        hold.unlink()
        after = await until(store, lambda s: s.build != "running")
        assert after.build == "idle" and after.reason is None and after.last_built == "hnsw"
        assert after.last_ended is not None and after.last_points == THRESHOLD
        assert (after.started, after.progress, after.eta_s) == (None, None, None)
        assert after.indexed >= THRESHOLD - 20 and after.unindexed <= 20  # the catch-up's points only
        assert after.indexed + after.unindexed == len(ledger.points)
        stored = await ledger.check()
        assert {k for k, v in ledger.points.items() if v["doc_id"] == "d5"} == {
            c.id_in("c") for c in doc("d5", 2, "h2")}
        assert not any(v["doc_id"] == "d7" for v in ledger.points.values())
        d9 = doc("d9", 5, "h3")
        assert np.allclose(stored[d9[0].id_in("c")].dense, _unit(vectors_for(d9)[0]), atol=1e-5)
        assert stored[d9[0].id_in("c")].sparse == sparse_for(d9)[0]
        check_renormalised(stored)
        assert len(await answers(store)) == len(during)
        assert "metadata.v" in store._collections["c"].shard.info().payload_schema  # created during the build
        meta = json.loads((root / "collections" / "c" / "collection.json").read_text())
        assert meta["shard"] == "shard-1" and shard_folders(root) == ["shard-1"]
    finally:
        await store.aclose()
    again = await EdgeStore.open(root)
    try:
        check_renormalised(await ledger.check(again))
        assert (await status(again)).indexed >= THRESHOLD - 20
        assert len(await answers(again)) == 5
    finally:
        await again.aclose()


async def test_writes_wait_for_the_swap_while_a_build_runs_with_too_many_points_unindexed(tmp_path: Path) -> None:
    root, hold = tmp_path / "qdrant", tmp_path / "hold"
    hold.touch()
    store = await open_edge(root, hold, build_max_unindexed=THRESHOLD + 5)
    try:
        ledger = await filled(store)
        await until(store, lambda s: s.phase == "held")
        await ledger.upsert(doc("under", 5, "h1"))  # THRESHOLD unindexed before it: below the bound, it goes on
        waiting = asyncio.create_task(ledger.upsert(doc("over", 2, "h1")))
        held = await until(store, lambda s: s.waiting_writes == 1)
        assert (held.build, held.phase, held.unindexed) == ("running", "held", THRESHOLD + 5)
        assert not waiting.done()
        assert len(await answers(store)) == 5  # searches are answered meanwhile
        await ledger.delete("d7")  # and deletes go on: they add nothing to scan
        assert not waiting.done() and doc("over", 2, "h1")[0].id_in("c") not in ledger.points
        hold.unlink()
        await waiting
        after = await until(store, lambda s: s.build != "running")
        assert (after.build, after.waiting_writes, after.last_points) == ("idle", 0, THRESHOLD)
        await ledger.check()  # the write that waited, and every other one, point by point
        assert doc("over", 2, "h1")[0].id_in("c") in ledger.points
    finally:
        await store.aclose()


async def test_points_replaced_or_re_encoded_after_a_build_count_as_unindexed_and_start_the_next(
        tmp_path: Path) -> None:
    """The engine writes a replaced point, or one whose BM25 vector is rewritten, to its unindexed segment and
    still counts the old copy in the graph as indexed: the store counts what it wrote since the last build."""
    store = await EdgeStore.open(tmp_path / "qdrant", background_build=True, build_threshold=THRESHOLD,
                                 write_batch=64)
    meta = tmp_path / "qdrant" / "collections" / "c" / "collection.json"
    try:
        await store.create_collection("c", dimensions=DIMS, model="m", sparse=SparseConfig())
        ledger = Ledger(store)
        for i in range(THRESHOLD // 5):
            await ledger.upsert(doc(f"d{i}", 5, "h1"))
        first = await until(store, lambda s: s.build != "running")
        assert (first.build, first.last_built, first.indexed, first.unindexed) == ("idle", "hnsw", THRESHOLD, 0)
        assert json.loads(meta.read_text())["shard"] == "shard-1"
        for i in range(THRESHOLD // 10):  # half the documents, new versions under the same ids
            await ledger.replace(doc(f"d{i}", 5, "h2"))
        half = await status(store)
        assert (half.build, half.indexed, half.unindexed) == ("idle", THRESHOLD // 2, THRESHOLD // 2)
        await store.set_sparse_vectors("c", [(pid, RENORMALISED) for pid in sorted(ledger.points)])  # re-encoded
        second = await until(store, lambda s: s.build != "running")
        assert (second.build, second.last_points, second.indexed, second.unindexed) == ("idle", THRESHOLD,
                                                                                        THRESHOLD, 0)
        assert json.loads(meta.read_text())["shard"] == "shard-2"  # a second build swapped in
        stored = await ledger.check()
        assert {p.sparse == RENORMALISED for p in stored.values()} == {True}
    finally:
        await store.aclose()


async def test_a_store_killed_during_a_build_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    root, hold = tmp_path / "qdrant", tmp_path / "hold"
    hold.touch()
    store = await ProcessStore.open(root, background_build=True, build_threshold=THRESHOLD, build_hold=str(hold),
                                    write_batch=64)
    try:
        ledger = await filled(store)
        await until(store, lambda s: s.phase == "held")
        await answers(store)
        await write_during_the_build(ledger)
        os.kill(store._process.pid, signal.SIGKILL)
        await asyncio.to_thread(store._process.wait, 30)
    finally:
        await store.aclose()
    assert shard_folders(root) == ["shard", "shard-1"]  # the build's copy, as the kill left it
    again = await EdgeStore.open(root)
    try:
        assert shard_folders(root) == ["shard"]  # the copy never swapped in is gone
        check_renormalised(await ledger.check(again))
        assert len(await answers(again)) == 5
        assert (await status(again)).build == "off"
    finally:
        await again.aclose()


@pytest.mark.parametrize("change", ["int8", "delete"])
async def test_a_build_is_given_up_when_the_quantization_changes_or_the_collection_goes(
        tmp_path: Path, change: str) -> None:
    root, hold = tmp_path / "qdrant", tmp_path / "hold"
    hold.touch()
    store = await open_edge(root, hold)
    try:
        ledger = await filled(store)
        await until(store, lambda s: s.phase == "held")
        if change == "delete":
            await store.delete_collection("c")
            await asyncio.sleep(0.3)
            assert not (root / "collections" / "c").exists()
            return
        await store.set_quantization("c", "int8")
        given_up = await until(store, lambda s: s.build != "running")
        assert given_up.build == "failed" and "quantization" in (given_up.reason or "")
        assert shard_folders(root) == ["shard"] and given_up.indexed == 0
        await ledger.check()
        assert len(await answers(store)) == 5
        hold.unlink()
        await ledger.upsert(doc("after", 1, "h1"))  # the next write past the threshold builds what is asked now
        rebuilt = await until(store, lambda s: s.build != "running")
        assert (rebuilt.build, rebuilt.last_built, rebuilt.reason) == ("idle", "int8", None)
        await ledger.check()
    finally:
        await store.aclose()


async def test_a_failed_builder_is_reported_and_its_copy_deleted(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from service.store import edge_background

    # A spec whose dimensions are not the shard's: the engine refuses to load it and the builder exits 1.
    real = edge_background.build_spec
    monkeypatch.setattr(edge_background, "build_spec", lambda dims, *a: {**real(dims, *a), "dimensions": dims + 1})
    root = tmp_path / "qdrant"
    store = await open_edge(root, tmp_path / "no-hold")
    try:
        ledger = await filled(store)
        failed = await until(store, lambda s: s.build != "running")
        assert failed.build == "failed" and "builder process exited with 1" in (failed.reason or "")
        assert shard_folders(root) == ["shard"]
        await ledger.upsert(doc("later", 2, "h1"))  # the store goes on serving
        await ledger.check()
        assert len(await answers(store)) == 5
    finally:
        await store.aclose()


def _unit(v: list[float]) -> list[float]:
    a = np.asarray(v)
    return (a / np.linalg.norm(a)).tolist()


async def test_a_store_killed_after_a_swap_serves_the_new_shard_with_every_write(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    store = await ProcessStore.open(root, background_build=True, build_threshold=THRESHOLD, write_batch=64)
    try:
        ledger = await filled(store)
        await until(store, lambda s: s.build == "idle" and s.last_built == "hnsw")
        await write_during_the_build(ledger)  # after the swap: into the new shard's WAL only
        os.kill(store._process.pid, signal.SIGKILL)
        await asyncio.to_thread(store._process.wait, 30)
    finally:
        await store.aclose()
    again = await EdgeStore.open(root)
    try:
        assert shard_folders(root) == ["shard-1"]
        check_renormalised(await ledger.check(again))
        assert (await status(again)).indexed >= THRESHOLD - 20
        assert len(await answers(again)) == 5
    finally:
        await again.aclose()


async def test_a_snapshot_taken_during_a_build_holds_the_served_shard_only(tmp_path: Path) -> None:
    root, hold = tmp_path / "qdrant", tmp_path / "hold"
    hold.touch()
    store = await open_edge(root, hold)
    try:
        ledger = await filled(store)
        await until(store, lambda s: s.phase == "held")
        await write_during_the_build(ledger)
        during = await store.snapshot("c", tmp_path / "snaps" / "during")
        hold.unlink()
        await until(store, lambda s: s.build != "running")
        after = await store.snapshot("c", tmp_path / "snaps" / "after")
    finally:
        await store.aclose()
    assert sorted(p.name for p in (during.path / "collections" / "c").iterdir()) == ["collection.json", "shard"]
    assert sorted(p.name for p in (after.path / "collections" / "c").iterdir()) == ["collection.json", "shard-1"]
    for snap in (during, after):
        target = tmp_path / f"restored-{snap.id}"
        snapshots.restore(snap.path, target)
        restored = await EdgeStore.open(target)
        try:
            check_renormalised(await ledger.check(restored))
        finally:
            await restored.aclose()


@pytest.mark.parametrize("opener", ["in-process", "child"])
async def test_writes_racing_the_catch_up_and_the_swap_are_all_kept(tmp_path: Path, opener: str) -> None:
    """A writer that upserts, replaces and deletes without pause from the build's release to its end: its writes
    land before, between and after the catch-up's rounds."""
    root, hold = tmp_path / "qdrant", tmp_path / "hold"
    hold.touch()
    kw: dict[str, Any] = {"background_build": True, "build_threshold": THRESHOLD, "build_hold": str(hold),
                          "write_batch": 64}
    store: VectorStore = await (EdgeStore.open(root, **kw) if opener == "in-process" else ProcessStore.open(root, **kw))
    try:
        ledger = await filled(store)
        await until(store, lambda s: s.phase == "held")
        ended = asyncio.Event()
        written = [0]

        async def writer() -> int:
            i = 0
            while not ended.is_set() or i < 10:
                await ledger.upsert(doc(f"w{i}", 3, "h1"))
                if i % 3 == 2:
                    await ledger.delete(f"w{i - 2}")
                    await ledger.replace(doc(f"d{i % 100}", 1 + i % 4, f"r{i}"))
                i += 1
                written[0] = i
            return i

        task = asyncio.create_task(writer())
        hold.unlink()
        after = await until(store, lambda s: s.build != "running")
        during = written[0]
        ended.set()
        rounds = await task
        assert after.build == "idle" and after.last_built == "hnsw" and rounds >= 10
        assert during >= 3  # writes landed while the build caught up and swapped
        await ledger.check()
    finally:
        await store.aclose()
    again = await EdgeStore.open(root)
    try:
        await ledger.check(again)
    finally:
        await again.aclose()


async def test_a_catch_up_answers_the_loop_between_its_batches(tmp_path: Path) -> None:
    """In the store's own process (``inline``) every engine call runs on the loop's thread: the catch-up gives the
    loop up after each batch, so what else waits on it (searches, here a task reading the copy) runs one batch
    apart, not once the whole catch-up is over."""
    import qdrant_edge as qe

    from service.store.edge_shard import _config

    store = await EdgeStore.open(tmp_path / "qdrant", inline=True, write_batch=4)
    try:
        await store.create_collection("c", dimensions=DIMS, model="m", sparse=SparseConfig())
        chunks = [c for i in range(6) for c in doc(f"d{i}", 5, "h1")]
        await store.upsert("c", chunks, vectors_for(chunks), sparse_for(chunks))
        coll = store._collections["c"]
        copy = qe.EdgeShard.create(str(tmp_path / "copy"), _config(DIMS, True))
        seen: list[int] = []
        done = False

        async def reader() -> None:
            while not done:
                seen.append(copy.info().points_count)
                await asyncio.sleep(0)

        try:
            task = asyncio.create_task(reader())
            await asyncio.sleep(0)
            await store._builds._catch_up(coll, copy, sorted(c.id_in("c") for c in chunks))
            done = True
            await task
        finally:
            copy.close()
        assert seen == [0, 4, 8, 12, 16, 20, 24, 28, 30]
    finally:
        await store.aclose()


def oom_score_adj(pid: int) -> str:
    return Path(f"/proc/{pid}/oom_score_adj").read_text()


async def test_a_killed_builder_is_reported_and_the_store_goes_on(tmp_path: Path) -> None:
    """The builder is what the kernel kills first when the host runs out of memory (``oom_score_adj`` 1000, set
    as it is spawned); its SIGKILL stands for that kill."""
    root = tmp_path / "qdrant"
    store = await open_edge(root, tmp_path / "no-hold")
    try:
        ledger = await filled(store)
        coll = store._collections["c"]
        async with asyncio.timeout(60):
            while True:
                job = store._builds.job(coll)
                if job is not None and job.process is not None:
                    break
                await asyncio.sleep(0.002)
        assert oom_score_adj(job.process.pid) == "1000\n"
        job.process.kill()  # still starting up: its Python and the engine load take far longer than this poll
        failed = await until(store, lambda s: s.build != "running")
        assert failed.build == "failed" and "killed by signal 9" in (failed.reason or "")
        assert shard_folders(root) == ["shard"] and failed.indexed == 0
        await ledger.upsert(doc("later", 2, "h1"))
        await ledger.check()
        assert len(await answers(store)) == 5
    finally:
        await store.aclose()


def segment_configs(shard: Path) -> list[tuple[int, bool]]:
    """Each indexed segment's graph degree (``m``, 0: no graph) and whether it holds int8 copies, as the engine
    wrote them."""
    return sorted((json.loads((seg / "vector_index-dense" / "hnsw_config.json").read_text())["m"],
                   (seg / "vector_storage-dense" / "quantized.data").is_file())
                  for seg in (shard / "segments").iterdir() if (seg / "vector_index-dense").is_dir())


@pytest.mark.parametrize("quantization", ["int8", "hnsw-int8"])
async def test_a_quantized_collection_builds_its_mode_and_ragserve_optimize_follows_the_swapped_shard(
        tmp_path: Path, quantization: str) -> None:
    from service.store.edge_optimize import optimize_collection

    root = tmp_path / "qdrant"
    # int8 recorded on a collection (as an import or `ragserve optimize --int8` does); hnsw-int8 by the
    # setting for new collections (RAGSERVE_QDRANT__EDGE_QUANTIZATION).
    store = await open_edge(root, tmp_path / "no-hold", quantization="hnsw-int8" if quantization != "int8" else None)
    try:
        await store.create_collection("c", dimensions=DIMS, model="m", sparse=SparseConfig())
        if quantization == "int8":
            await store.set_quantization("c", "int8")
        assert (await store.describe("c")).quantization == quantization
        ledger = Ledger(store)
        for i in range(THRESHOLD // 5):
            await ledger.upsert(doc(f"d{i}", 5, "h1"))
        built = await until(store, lambda s: s.build != "running")
        assert built.build == "idle" and built.last_built == quantization and built.indexed >= THRESHOLD - 20
        await ledger.upsert(doc("late", 3, "h1"))
    finally:
        await store.aclose()
    assert shard_folders(root) == ["shard-1"]
    graph = 16 if quantization == "hnsw-int8" else 0
    assert set(segment_configs(root / "collections" / "c" / "shard-1")) == {(graph, True)}
    assert json.loads((root / "collections" / "c" / "collection.json").read_text())["quantization"] == quantization
    done = optimize_collection(root, "c", progress=lambda line: None)
    assert done["mode"] == quantization and done["points"] == len(ledger.points)
    assert set(segment_configs(root / "collections" / "c" / "shard-1")) == {(graph, True)}
    again = await EdgeStore.open(root)
    try:
        await ledger.check(again)
        assert len(await answers(again)) == 5
    finally:
        await again.aclose()


async def test_builds_of_two_collections_run_one_after_the_other_and_both_swap(tmp_path: Path) -> None:
    root, hold = tmp_path / "qdrant", tmp_path / "hold"
    hold.touch()
    store = await open_edge(root, hold)
    try:
        ledgers = []
        for name in ("a", "b"):
            await store.create_collection(name, dimensions=DIMS, model="m", sparse=SparseConfig())
            ledger = Ledger(store, name)
            for i in range(THRESHOLD // 5):
                await ledger.upsert(doc(f"{name}{i}", 5, "h1"))
            ledgers.append(ledger)
        phases = {(await status(store, "a")).phase, (await status(store, "b")).phase}
        assert "queued" in phases or phases == {"held"}  # b waits for a's copy and builder
        for name in ("a", "b"):
            await until(store, lambda s: s.phase == "held", name=name)
            await ledgers[0 if name == "a" else 1].upsert(doc(f"{name}-late", 2, "h1"))
        hold.unlink()
        for name, ledger in zip(("a", "b"), ledgers, strict=True):
            done = await until(store, lambda s: s.build != "running", name=name)
            assert done.build == "idle" and done.last_built == "hnsw"
            await ledger.check()
    finally:
        await store.aclose()


async def test_the_store_owner_builds_for_its_peers_and_a_sigkill_mid_build_loses_nothing(tmp_path: Path) -> None:
    """``serve --workers N``: the owner runs the builds; one peer fills, the other writes during the build, the
    owner is SIGKILLed while it is held, and its restart (the folder's leftover copy removed) has every write."""
    from service.store.owner import StoreOwner

    root, hold = tmp_path / "qdrant", tmp_path / "hold"
    hold.touch()
    owner = StoreOwner(root, {"background_build": True, "build_threshold": THRESHOLD, "build_hold": str(hold),
                              "write_batch": 64})
    await asyncio.to_thread(owner.start)
    try:
        a = await ProcessStore.attach(root, owner.socket)
        b = await ProcessStore.attach(root, owner.socket)
        ledger = await filled(a)
        await until(b, lambda s: s.phase == "held")
        ledger.store = b
        await write_during_the_build(ledger)
        first = owner.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)

        async def answered() -> int | None:
            try:
                return await b.count("c")
            except StoreError:
                return None

        assert await until_async(answered, "the next owner answers the same peer", 120) == len(ledger.points)
        assert owner.pid != first
        assert shard_folders(root) == ["shard"]
        check_renormalised(await ledger.check(b))
        assert len(await answers(b)) == 5
        await a.aclose()
        await b.aclose()
    finally:
        await asyncio.to_thread(owner.stop)


async def test_settings_changed_while_a_build_swaps_keep_both_the_settings_and_the_new_shard(tmp_path: Path) -> None:
    """``collection.json`` holds the settings and names the shard: a settings change racing the swap's rewrite
    must leave the last settings and the shard served (else a restart would look for a deleted folder)."""
    root, hold = tmp_path / "qdrant", tmp_path / "hold"
    hold.touch()
    store = await open_edge(root, hold)
    try:
        ledger = await filled(store)
        await until(store, lambda s: s.phase == "held")
        done = asyncio.Event()
        last = [""]

        async def change_settings() -> None:
            i = 0
            while not done.is_set() or i < 5:
                last[0] = f"export-{i}"
                await store.set_importing("c", last[0])
                i += 1

        task = asyncio.create_task(change_settings())
        hold.unlink()
        await until(store, lambda s: s.build != "running")
        done.set()
        await task
        meta = json.loads((root / "collections" / "c" / "collection.json").read_text())
        assert (meta["shard"], meta["importing"]) == ("shard-1", last[0])
    finally:
        await store.aclose()
    again = await EdgeStore.open(root)
    try:
        assert (await again.describe("c")).importing == last[0]
        await ledger.check(again)
    finally:
        await again.aclose()


def test_a_running_builds_progress_and_eta_are_timed_against_the_last_builds_rate() -> None:
    """1,000 points of 100 dims at 1 ms per point-dimension: a build expected to take 100 s."""
    assert estimate("queued", 0.0, 0, 100, 1e-3) == (0.0, None)  # the wait behind another build is unknown
    assert estimate("copying", 0.0, 0, 100, 1e-3) == (0.0, None)
    assert estimate("building", 25.0, 1000, 100, 1e-3) == (0.25, 75.0)
    assert estimate("building", 150.0, 1000, 100, 1e-3) == (ALMOST_DONE, 0.0)  # slower than the last: never 1
    assert estimate("catching up", 0.0, 1000, 100, 1e-3) == (ALMOST_DONE, None)
    assert estimate("held", 0.0, 1000, 100, 1e-3) == (ALMOST_DONE, None)


async def test_a_collection_has_its_own_switch_and_threshold(tmp_path: Path) -> None:
    """``RAGSERVE_QDRANT__EDGE_BUILD_COLLECTIONS``: "off" never builds by itself (an operator still can), "soon"
    builds at 50 points, "c" keeps the store's threshold; each reached by the same 60 points."""
    store = await EdgeStore.open(tmp_path / "qdrant", background_build=True, build_threshold=THRESHOLD,
                                 write_batch=64, build_overrides={"off": {"enabled": False}, "soon": {"threshold": 50}})
    try:
        for name in ("off", "soon", "c"):
            await store.create_collection(name, dimensions=DIMS, model="m", sparse=SparseConfig())
            await Ledger(store, name).upsert([c for i in range(12) for c in doc(f"{name}{i}", 5, "h1")])  # one write
        soon = await until(store, lambda s: s.build != "running", name="soon")
        assert (soon.build, soon.last_built, soon.last_points, soon.unindexed) == ("idle", "hnsw", 60, 0)
        off, default = await status(store, "off"), await status(store, "c")
        assert (off.build, off.indexed, off.unindexed, off.last_built) == ("off", 0, 60, None)
        assert (default.build, default.indexed, default.unindexed, default.last_built) == ("idle", 0, 60, None)
        await store.build_index("off")  # on demand, whatever the switch says
        built = await until(store, lambda s: s.build != "running", name="off")
        assert (built.build, built.last_built, built.unindexed) == ("off", "hnsw", 0)
    finally:
        await store.aclose()


async def test_a_build_short_of_disk_is_given_up_and_says_why(tmp_path: Path) -> None:
    """The disk as the store sees it: the reserve (``min_free``) set so that the free space above it holds half
    of the shard's allocated size, plenty for the last small write and not enough for the build's copy. Chunks
    of 20 kB of text make that half several MiB, far more than other processes write while this runs."""
    root = tmp_path / "qdrant"
    first = await EdgeStore.open(root)
    ledger = Ledger(first)
    await first.create_collection("c", dimensions=DIMS, model="m", sparse=SparseConfig())
    for i in range(THRESHOLD // 5 - 1):
        await ledger.upsert([replace(c, text=c.text + " " + "x" * 20_000) for c in doc(f"d{i}", 5, "h1")])
    await first.aclose()
    shard = _allocated_bytes([root / "collections" / "c" / "shard"])
    assert shard > 8 << 20, shard
    st = os.statvfs(root)
    store = await EdgeStore.open(root, background_build=True, build_threshold=THRESHOLD, write_batch=64,
                                 min_free_bytes=st.f_bavail * st.f_frsize - shard // 2)
    try:
        ledger.store = store
        await ledger.upsert(doc(f"d{THRESHOLD // 5 - 1}", 5, "h1"))  # the write that reaches the threshold
        failed = await until(store, lambda s: s.build != "running")
        assert failed.build == "failed", failed
        assert (failed.reason or "").startswith("no room for the build's copy of the shard: the data disk is full: ")
        assert "RAGSERVE_QDRANT__EDGE_MIN_FREE_MB" in (failed.reason or "")
        assert shard_folders(root) == ["shard"] and (failed.indexed, failed.unindexed) == (0, THRESHOLD)
        await ledger.upsert(doc("later", 2, "h1"))  # the store goes on serving
        await ledger.check()
        assert len(await answers(store)) == 5
    finally:
        await store.aclose()
