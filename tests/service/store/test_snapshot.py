"""Snapshots of the embedded store (the real Qdrant Edge store; in its own process where the claim is about
serving) and their restore: a snapshot taken while writes and searches run holds exactly what it promises, a
restored folder answers as the source did, and a snapshot whose files do not match its manifest, or a target that
is not empty, is refused with nothing written."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from service import cli
from service.sparse.config import SparseConfig, SparseStats
from service.store import snapshots
from service.store.edge import EdgeStore
from service.store.errors import CollectionNotFound
from service.store.layout import MARKER
from service.store.proxy import ProcessStore
from service.store.snapshots import RestoreTargetNotEmpty, SnapshotError
from service.store.types import Chunk, SparseVector
from tests.support.snapshots import sealed_snapshot

DIMS = 16
CHUNKS_PER_DOC = 5
VOCAB = 40


def _doc(doc_id: str, chunks: int = CHUNKS_PER_DOC) -> tuple[list[Chunk], list[list[float]], list[SparseVector]]:
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "little"))
    items = [Chunk(doc_id, i, f"{doc_id} part {i}", {"n": i}, content_hash=f"h-{doc_id}", chunk_count=chunks,
                   source="s") for i in range(chunks)]
    dense = rng.normal(size=(chunks, DIMS)).tolist()
    sparse = [SparseVector(sorted(rng.choice(VOCAB, 3, replace=False).tolist()), [1.0, 0.5, 0.25])
              for _ in range(chunks)]
    return items, dense, sparse


async def _open(root: Path) -> ProcessStore:
    """The store as ragserve serves it, in its own process: the snapshot taken while writes and searches run
    goes through that boundary. write_batch=2: a document of 5 chunks is 3 engine writes, so a snapshot that
    cut between them would show."""
    return await ProcessStore.open(root, write_batch=2)


async def _open_here(root: Path) -> EdgeStore:
    """The same engine in this process, for the tests whose claim is about a snapshot's files and a restored
    folder, not about the process boundary (a spawn each would cost the session's cap)."""
    return await EdgeStore.open(root, write_batch=2)


async def _whole_documents(root: Path, name: str) -> dict[str, bool]:
    store = await _open_here(root)
    try:
        return {d: s.complete for d, s in (await store.doc_states(name)).items()}
    finally:
        await store.aclose()


async def test_a_snapshot_taken_while_writes_and_searches_run(tmp_path: Path) -> None:
    store = await _open(tmp_path / "qdrant")
    started: list[str] = []
    acknowledged: list[str] = []
    searches: list[list[str]] = []
    fourth_acknowledged = asyncio.Event()
    stop = asyncio.Event()

    async def write() -> None:
        k = 0
        while not stop.is_set():
            doc_id = f"d{k:03d}"
            started.append(doc_id)
            await store.upsert("c", *_doc(doc_id))
            acknowledged.append(doc_id)
            if k == 3:
                fourth_acknowledged.set()
            k += 1

    async def search() -> None:
        query = np.random.default_rng(0).normal(size=DIMS).tolist()
        while not stop.is_set():
            hits = await store.query("c", dense=query, sparse=SparseVector([1, 2], [1.0, 1.0]), limit=10)
            searches.append([h.id for h in hits])

    try:
        await store.create_collection("c", dimensions=DIMS, model="m", sparse=SparseConfig())
        writer, searcher = asyncio.create_task(write()), asyncio.create_task(search())
        await fourth_acknowledged.wait()
        acknowledged_before = set(acknowledged)
        info = await store.snapshot("c", tmp_path / "snaps" / "s1")
        started_before_return = set(started)
        stop.set()
        await asyncio.gather(writer, searcher)  # neither failed while the snapshot was taken
    finally:
        await store.aclose()

    restored = tmp_path / "restored"
    snapshots.restore(info.path, restored)
    documents = await _whole_documents(restored, "c")
    assert acknowledged_before <= set(documents)  # every write acknowledged before the call began is in it
    assert set(documents) <= started_before_return  # nothing whose write began after it returned
    assert documents == dict.fromkeys(documents, True)  # every document in it whole: all 5 chunks
    assert info.collections == {"c": CHUNKS_PER_DOC * len(documents)}
    assert searches  # the searcher ran, and every search answered


async def test_restore_answers_as_the_source_did_at_snapshot_time(tmp_path: Path) -> None:
    source = tmp_path / "qdrant"
    store = await _open_here(source)
    stats = SparseStats(documents=12, terms=345, estimated=False)
    rng = np.random.default_rng(5)
    queries = [rng.normal(size=DIMS).tolist() for _ in range(3)]
    sparse_queries = [SparseVector([i, i + 7], [1.0, 0.5]) for i in (1, 4, 9)]

    async def answers(s: EdgeStore) -> dict[str, object]:
        out: dict[str, object] = {"counts": {c.name: c.points for c in await s.list_collections()}}
        for name in ("kb", "other"):
            for i, (dense, sparse) in enumerate(zip(queries, sparse_queries, strict=True)):
                out[f"{name}/dense/{i}"] = [h.id for h in await s.query(name, dense=dense, limit=10)]
                out[f"{name}/sparse/{i}"] = [h.id for h in await s.query(name, sparse=sparse, limit=10)]
                out[f"{name}/hybrid/{i}"] = [h.id for h in await s.query(name, dense=dense, sparse=sparse, limit=10)]
        out["kb/info"] = await s.describe("kb")
        return out

    try:
        await store.create_collection("kb", dimensions=DIMS, model="m", filter_fields={"n": "integer"},
                                      sparse=SparseConfig())
        await store.create_collection("other", dimensions=DIMS, model="m", sparse=SparseConfig(k1=1.5))
        for k in range(12):
            await store.upsert("kb", *_doc(f"kb{k}"))
        for k in range(4):
            await store.upsert("other", *_doc(f"o{k}", chunks=2))
        await store.delete_documents("kb", ["kb3"])
        await store.set_sparse_settings("kb", SparseConfig(), stats)
        before = await answers(store)
        info = await store.snapshot(None, tmp_path / "snaps" / "all")
    finally:
        await store.aclose()

    restored = tmp_path / "new" / "qdrant"
    snapshots.restore(info.path, restored)
    again = await _open_here(restored)
    try:
        after = await answers(again)
    finally:
        await again.aclose()
    assert after == before
    assert before["counts"] == {"kb": 55, "other": 8} == info.collections
    assert (restored / MARKER).read_bytes() == (source / MARKER).read_bytes()
    manifest = json.loads((info.path / snapshots.MANIFEST).read_text())
    assert manifest["store_marker"] == json.loads((source / MARKER).read_text())
    assert manifest["collections"] == [{"name": "kb", "points": 55}, {"name": "other", "points": 8}]
    assert manifest["engine"]["name"] == "qdrant-edge" and manifest["backend"] == "edge"
    assert json.loads((restored / "collections" / "kb" / "collection.json").read_text())["sparse_stats"] == \
        stats.model_dump()


@pytest.fixture
async def snapshot(tmp_path: Path) -> Path:
    store = await _open_here(tmp_path / "qdrant")
    try:
        await store.create_collection("kb", dimensions=DIMS, model="m", sparse=SparseConfig())
        await store.upsert("kb", *_doc("a"))
        info = await store.snapshot("kb", tmp_path / "snaps" / "one")
    finally:
        await store.aclose()
    return info.path


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_flipped_byte_is_refused_and_nothing_is_written(snapshot: Path, tmp_path: Path) -> None:
    manifest = json.loads((snapshot / snapshots.MANIFEST).read_text())
    victim = next(rel for rel, f in sorted(manifest["files"].items()) if "segments" in rel and f["bytes"] > 0)
    _flip_one_byte(snapshot / victim)
    target = tmp_path / "restored"
    with pytest.raises(SnapshotError) as refused:
        snapshots.restore(snapshot, target)
    assert refused.value.code == "snapshot_corrupt" and victim in refused.value.message
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qdrant", "snaps"]  # no staging folder left


def test_a_missing_or_unlisted_file_is_refused(snapshot: Path, tmp_path: Path) -> None:
    (snapshot / "collections" / "kb" / "extra.bin").write_bytes(b"x")
    with pytest.raises(SnapshotError) as extra:
        snapshots.restore(snapshot, tmp_path / "r1")
    (snapshot / "collections" / "kb" / "extra.bin").unlink()
    (snapshot / "collections" / "kb" / "collection.json").unlink()
    with pytest.raises(SnapshotError) as missing:
        snapshots.restore(snapshot, tmp_path / "r2")
    assert (extra.value.code, missing.value.code) == ("snapshot_corrupt", "snapshot_incomplete")
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()


def test_restore_into_a_non_empty_folder_is_refused(snapshot: Path, tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(RestoreTargetNotEmpty):
        snapshots.restore(snapshot, target)
    assert [p.name for p in target.iterdir()] == ["keep.txt"] and (target / "keep.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert snapshots.restore(snapshot, empty).collections == {"kb": CHUNKS_PER_DOC}


async def test_a_snapshot_inside_the_store_or_of_an_unknown_collection_is_refused(tmp_path: Path) -> None:
    store = await _open_here(tmp_path / "qdrant")
    try:
        with pytest.raises(SnapshotError) as inside:
            await store.snapshot(None, tmp_path / "qdrant" / "snaps" / "x")
        with pytest.raises(CollectionNotFound):
            await store.snapshot("nope", tmp_path / "snaps" / "y")
    finally:
        await store.aclose()
    assert inside.value.code == "snapshot_dir_inside_store"
    assert not (tmp_path / "snaps").exists() or list((tmp_path / "snaps").iterdir()) == []


def test_a_manifest_other_than_the_one_expected_is_refused_before_anything_is_written(snapshot: Path,
                                                                                     tmp_path: Path) -> None:
    taken = snapshots.SnapshotInfo.read(snapshot).manifest_sha256
    with pytest.raises(SnapshotError) as other:
        snapshots.restore(snapshot, tmp_path / "r1", expect_sha256="0" * 64)
    assert (other.value.code, other.value.param) == ("snapshot_manifest_mismatch", "expect_sha256")
    assert not (tmp_path / "r1").exists()
    with pytest.raises(SystemExit) as refused:
        cli.main(["restore", str(snapshot), "--data-dir", str(tmp_path / "d1"), "--expect-sha256", "1" * 64])
    assert f"has sha256 {taken}, not the {'1' * 64} expected" in str(refused.value.code)
    assert not (tmp_path / "d1").exists()
    assert snapshots.restore(snapshot, tmp_path / "r2", expect_sha256=taken.upper()).collections == \
        {"kb": CHUNKS_PER_DOC}


def _broken(root: Path, snapshot_id: str, manifest: bytes) -> Path:
    (root / snapshot_id).mkdir(parents=True)
    (root / snapshot_id / snapshots.MANIFEST).write_bytes(manifest)
    return root / snapshot_id


def test_a_listing_leaves_out_the_folders_whose_manifest_cannot_be_read(tmp_path: Path) -> None:
    root = tmp_path / "snaps"
    first, last = sealed_snapshot(root, "20260101T000000Z-000001"), sealed_snapshot(root, "20260104T000000Z-000004")
    _broken(root, "20260102T000000Z-000002", b"{not json")
    _broken(root, "20260103T000000Z-000003", json.dumps({"format": 1, "collections": [{"name": "kb"}]}).encode())
    _broken(root, "20260103T000000Z-000005", json.dumps({"format": 99}).encode())
    (root / "20260105T000000Z-000006.partial").mkdir()  # one being written: neither listed nor unreadable
    (root / "notes").mkdir()  # not a snapshot
    found, unreadable = snapshots.scan(root)
    assert [s.path for s in found] == [first, last] == [s.path for s in snapshots.list_snapshots(root)]
    assert [(u.id, u.code) for u in unreadable] == [("20260102T000000Z-000002", "snapshot_corrupt"),
                                                    ("20260103T000000Z-000003", "snapshot_corrupt"),
                                                    ("20260103T000000Z-000005", "snapshot_invalid")]


def test_prune_keeps_the_newest_and_never_the_one_just_sealed_a_partial_or_an_unreadable_one(
        tmp_path: Path) -> None:
    root = tmp_path / "snaps"
    ids = [f"2026010{d}T000000Z-00000{d}" for d in range(1, 6)]
    sealed = [sealed_snapshot(root, i) for i in ids]
    broken = _broken(root, "20260100T000000Z-000000", b"{not json")  # the oldest of all, and unreadable
    partial = root / "20260109T000000Z-000009.partial"
    partial.mkdir()
    (partial / "half.bin").write_bytes(b"being written")

    assert snapshots.prune(root, 2, sealed=sealed[-1]) == sealed[:3]
    assert sorted(p.name for p in root.iterdir()) == [broken.name, ids[3], ids[4], partial.name]
    # The one just sealed is kept even where it sorts first (a clock set back): the others make room.
    early = sealed_snapshot(root, "20250101T000000Z-00000a")
    assert snapshots.prune(root, 2, sealed=early) == sealed[3:4]
    assert [s.path for s in snapshots.list_snapshots(root)] == [early, sealed[4]]
    assert (partial / "half.bin").read_bytes() == b"being written" and broken.is_dir()
    with pytest.raises(ValueError):
        snapshots.prune(root, 0, sealed=early)
