"""Export and import at the store level: a collection moved from the embedded store to the server backend
(qdrant-client's local mode) and back answers the same queries with the same ids in the same order, holds the
same payloads, and a damaged file is refused leaving no collection behind."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient

from service.profiles import EmbeddingModel
from service.sparse.config import SparseConfig, SparseStats
from service.store.base import VectorStore
from service.store.edge import EdgeStore
from service.store.edge_optimize import optimize_collection
from service.store.errors import CollectionNotFound
from service.store.proxy import ProcessStore
from service.store.qdrant_server import ServerStore
from service.store.types import Chunk, SparseVector
from service.transfer.errors import ExportCorrupt, ExportTruncated, ImportConflict, InvalidExport
from service.transfer.exporter import start_export
from service.transfer.format import ExportReader, ImportPoint
from service.transfer.importer import Importer

DIM = 16
N = 300
MODEL = EmbeddingModel("test-model", DIM, 512)
rng = np.random.default_rng(11)
VECTORS = rng.normal(size=(N, DIM)).astype(np.float32)
TERMS = [sorted(rng.choice(np.arange(1, 40), size=int(rng.integers(1, 8)), replace=False).tolist()) for _ in range(N)]
WEIGHTS = [rng.uniform(0.5, 2.0, size=len(t)).round(4).tolist() for t in TERMS]
QUERY = rng.normal(size=DIM).astype(np.float32)
SPARSE_QUERY = SparseVector([3, 7, 11, 20], [1.0, 1.0, 1.0, 1.0])
STATS = SparseStats(documents=N, terms=17 * N, estimated=True)


def chunk(i: int) -> Chunk:
    return Chunk(f"doc{i // 3}", i % 3, f"text {i} ünïcode", {"lang": ["en", "de"][i % 2], "n": i, "ok": i % 5 == 0},
                 content_hash=f"h{i // 3}", chunk_count=3, source=f"src{i % 4}" if i % 7 else None,
                 location={"page": i % 9, "headings": ["A", "B"]} if i % 2 else None,
                 tenant="org=acme" if i % 10 == 0 else None)


async def seed(store: VectorStore, name: str = "kb") -> None:
    await store.create_collection(name, dimensions=DIM, model=MODEL.name,
                                  filter_fields={"lang": "keyword", "n": "integer"}, sparse=SparseConfig(k1=1.4))
    await store.set_sparse_settings(name, SparseConfig(k1=1.4), STATS)
    await store.upsert(name, [chunk(i) for i in range(N)], VECTORS,
                       [SparseVector(TERMS[i], WEIGHTS[i]) for i in range(N)])


async def open_store(kind: str, root: Path) -> VectorStore:
    if kind == "edge":
        return await EdgeStore.open(root / "edge", write_batch=64)
    if kind == "edge-process":
        return await ProcessStore.open(root / "edge-process", write_batch=64)
    return ServerStore(AsyncQdrantClient(location=":memory:"))


async def export_bytes(store: VectorStore, name: str = "kb", page_size: int = 64) -> bytes:
    return b"".join([piece async for piece in await start_export(store, name, page_size=page_size)])


async def pieces(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def answers(store: VectorStore, name: str) -> list[list[str]]:
    """Ids in order for a dense, a sparse and a hybrid query with fixed vectors."""
    dense = await store.query(name, dense=QUERY.tolist(), limit=20)
    sparse = await store.query(name, sparse=SPARSE_QUERY, limit=20)
    hybrid = await store.query(name, dense=QUERY.tolist(), sparse=SPARSE_QUERY, limit=20)
    return [[h.id for h in hits] for hits in (dense, sparse, hybrid)]


async def stored(store: VectorStore, name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Every point's payload and sparse vector, and its dense vector, by id."""
    points = [p async for page in store.export_points(name) for p in page]
    # Sparse values as float32, as the file carries them and Qdrant stores them (local mode keeps Python floats).
    return ({p.id: (p.payload, p.sparse and (p.sparse.indices, np.asarray(p.sparse.values, np.float32).tolist()))
             for p in points},
            {p.id: np.asarray(p.dense, np.float32) for p in points})


def same_dense(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """The target engine normalises the (already unit) cosine vectors again on write: the last bit may move."""
    return sorted(a) == sorted(b) and all(np.allclose(a[k], b[k], rtol=0, atol=1e-6) for k in a)


@pytest.mark.parametrize(("source", "target"), [("edge", "server"), ("server", "edge"), ("edge-process", "server"),
                                                ("server", "edge-process")])
async def test_a_collection_moves_between_backends_unchanged(tmp_path: Path, source: str, target: str) -> None:
    src, dst = await open_store(source, tmp_path), await open_store(target, tmp_path)
    try:
        await seed(src)
        data = await export_bytes(src)
        result = await Importer(dst, MODEL).run("kb", pieces(data))

        assert (result.points, result.stored, result.created, result.resumed) == (N, N, True, False)
        assert await answers(dst, "kb") == await answers(src, "kb")
        (src_payloads, src_dense), (dst_payloads, dst_dense) = await stored(src, "kb"), await stored(dst, "kb")
        assert dst_payloads == src_payloads
        assert same_dense(dst_dense, src_dense)
        before, after = await src.get_collection("kb"), await dst.get_collection("kb")
        assert (after.dimensions, after.model, after.filter_fields, after.sparse, after.sparse_stats,
                after.importing) == (before.dimensions, before.model, before.filter_fields, before.sparse, STATS, None)
    finally:
        await src.aclose()
        await dst.aclose()


async def test_the_file_is_json_lines_with_a_header_and_a_checked_trailer(tmp_path: Path) -> None:
    store = await open_store("edge", tmp_path)
    try:
        await seed(store)
        lines = gzip.decompress(await export_bytes(store)).decode().splitlines()
    finally:
        await store.aclose()
    header, points, trailer = json.loads(lines[0]), [json.loads(x) for x in lines[1:-1]], json.loads(lines[-1])
    assert {k: header[k] for k in ("format", "version", "collection", "model", "dimensions", "distance",
                                   "filter_fields", "points")} == {
        "format": "ragserve-export", "version": 1, "collection": "kb", "model": MODEL.name, "dimensions": DIM,
        "distance": "cosine", "filter_fields": {"lang": "keyword", "n": "integer"}, "points": N}
    assert header["sparse"] == SparseConfig(k1=1.4).model_dump() and header["sparse_stats"] == STATS.model_dump()
    assert trailer["end"] is True and trailer["points"] == N
    by_id = {p["id"]: p for p in points}
    expected = {chunk(i).id_in("kb"): i for i in range(N)}
    assert sorted(by_id) == sorted(expected)
    for pid, i in expected.items():
        p = by_id[pid]
        assert {k: v for k, v in p.items() if k not in ("id", "dense", "sparse")} == chunk(i).payload()
        assert p["sparse"]["indices"] == TERMS[i]
        assert np.frombuffer(__import__("base64").b64decode(p["sparse"]["values"]), "<f4").tolist() == \
            np.asarray(WEIGHTS[i], np.float32).tolist()


async def test_importing_under_another_name_gives_that_names_ids(tmp_path: Path) -> None:
    src, dst = await open_store("edge", tmp_path), await open_store("server", tmp_path)
    try:
        await seed(src)
        await Importer(dst, MODEL).run("copy", pieces(await export_bytes(src)))
        ids = [p.id async for page in dst.export_points("copy") for p in page]
    finally:
        await src.aclose()
        await dst.aclose()
    assert sorted(ids) == sorted(chunk(i).id_in("copy") for i in range(N))


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


def _relined(data: bytes, edit: Any) -> bytes:
    lines = gzip.decompress(data).split(b"\n")[:-1]
    return gzip.compress(b"".join(line + b"\n" for line in edit(lines)))


def _lengthened(line: bytes) -> bytes:
    """The point's dense vector made 1e30 long, as a changed byte can make a stored (normalised) vector."""
    point = json.loads(line)
    long = np.zeros(DIM, dtype="<f4")
    long[3] = 1e30
    point["dense"] = base64.b64encode(long.tobytes()).decode()
    return json.dumps(point).encode()


@pytest.mark.parametrize("damage", ["truncated", "flipped_byte", "no_trailer", "point_dropped", "text_changed",
                                    "vector_lengthened"])
async def test_a_damaged_file_is_refused_and_leaves_no_collection(tmp_path: Path, damage: str) -> None:
    src, dst = await open_store("edge", tmp_path), await open_store("server", tmp_path)
    try:
        await seed(src)
        data = await export_bytes(src)
        damaged = {
            "truncated": lambda: data[: len(data) * 2 // 3],
            "flipped_byte": lambda: _flip(data, len(data) // 2),
            "no_trailer": lambda: _relined(data, lambda lines: lines[:-1]),
            "point_dropped": lambda: _relined(data, lambda lines: lines[:5] + lines[6:]),
            "text_changed": lambda: _relined(data, lambda lines: [*lines[:5], lines[5].replace(b"\"text ", b"\"txet "),
                                                                  *lines[6:]]),
            "vector_lengthened": lambda: _relined(data, lambda lines: [*lines[:5], _lengthened(lines[5]), *lines[6:]]),
        }[damage]()
        with pytest.raises(InvalidExport) as refused:
            await Importer(dst, MODEL).run("kb", pieces(damaged))
        with pytest.raises(CollectionNotFound):
            await dst.describe("kb")
    finally:
        await src.aclose()
        await dst.aclose()
    expected = {"truncated": ExportTruncated, "no_trailer": ExportTruncated, "point_dropped": ExportCorrupt,
                "text_changed": ExportCorrupt}
    if damage in expected:
        assert type(refused.value) is expected[damage]
    if damage == "vector_lengthened":  # refused at its line, before any store computes with it (its square overflows)
        assert str(refused.value) == ("the export file is not usable: line 6: dense: longer than a unit vector "
                                      "(a stored cosine vector is normalised)")
    assert refused.value.status_code == 422


async def test_refusals_before_anything_is_written(tmp_path: Path) -> None:
    src, dst = await open_store("edge", tmp_path), await open_store("server", tmp_path)
    try:
        await seed(src)
        data = await export_bytes(src)
        other_dims = EmbeddingModel(MODEL.name, DIM * 2, 512)
        with pytest.raises(ImportConflict) as dims:
            await Importer(dst, other_dims).run("kb", pieces(data))
        with pytest.raises(ImportConflict) as model:
            await Importer(dst, EmbeddingModel("another-model", DIM, 512)).run("kb", pieces(data))
        names_after_refusals = [c.name for c in await dst.list_collections()]

        await dst.create_collection("small", dimensions=DIM // 2, model=MODEL.name)
        await dst.create_collection("plain", dimensions=DIM, model=MODEL.name,
                                    filter_fields={"lang": "keyword", "n": "integer"}, sparse=SparseConfig())
        await seed(dst, "full")
        with pytest.raises(ImportConflict) as small:
            await Importer(dst, MODEL).run("small", pieces(data))
        with pytest.raises(ImportConflict) as bm25:
            await Importer(dst, MODEL).run("plain", pieces(data))
        with pytest.raises(ImportConflict) as full:
            await Importer(dst, MODEL).run("full", pieces(data))
        untouched = [(await dst.get_collection(n)).points for n in ("small", "plain", "full")]
    finally:
        await src.aclose()
        await dst.aclose()
    assert [e.value.code for e in (dims, model, small, bm25, full)] == [
        "dimension_mismatch", "model_mismatch", "dimension_mismatch", "sparse_settings_mismatch",
        "collection_not_empty"]
    assert names_after_refusals == []
    assert untouched == [0, 0, N]


async def test_an_interrupted_import_resumes_with_every_point_once(tmp_path: Path) -> None:
    src, dst = await open_store("edge", tmp_path), await open_store("server", tmp_path)
    try:
        await seed(src)
        data = await export_bytes(src)

        async def cut_off() -> AsyncIterator[bytes]:
            async for piece in pieces(data[: len(data) // 2]):
                yield piece
            raise ConnectionResetError("the client went away")

        with pytest.raises(ConnectionResetError):
            await Importer(dst, MODEL).run("kb", cut_off(), batch=32)
        header = next(x for x in ExportReader().feed(data[:4096]) if not isinstance(x, ImportPoint))
        marked = (await dst.describe("kb")).importing
        partial = await dst.count("kb")
        result = await Importer(dst, MODEL).run("kb", pieces(data))
        ids = sorted([p.id async for page in dst.export_points("kb") for p in page])
        after = (await dst.describe("kb")).importing
    finally:
        await src.aclose()
        await dst.aclose()
    assert marked == header.export_id  # type: ignore[union-attr]
    assert 0 < partial < N
    assert (result.resumed, result.created, result.points, result.stored) == (True, False, N, N)
    assert ids == sorted(chunk(i).id_in("kb") for i in range(N))
    assert after is None


class RecordingEdgeStore(EdgeStore):
    """The embedded store, keeping the ids of each upsert it was asked for (one list per call)."""

    upserts: list[list[str]]

    async def upsert(self, name: str, chunks: Any, vectors: Any, sparse: Any = None) -> None:
        self.__dict__.setdefault("upserts", []).append([c.id_in(name) for c in chunks])
        await super().upsert(name, chunks, vectors, sparse)


async def test_a_batch_of_points_with_and_without_sparse_vectors_is_one_upsert(tmp_path: Path) -> None:
    """Points without a sparse vector (every fourth here) go in the same store write as their batch's others,
    in the file's order, and come out as they went in."""
    src = await open_store("edge", tmp_path)
    dst = await RecordingEdgeStore.open(tmp_path / "recording", write_batch=64)
    try:
        await src.create_collection("kb", dimensions=DIM, model=MODEL.name, sparse=SparseConfig(k1=1.4))
        await src.upsert("kb", [chunk(i) for i in range(N)], VECTORS,
                         [SparseVector(TERMS[i], WEIGHTS[i]) if i % 4 else None for i in range(N)])
        data = await export_bytes(src)
        await Importer(dst, MODEL).run("kb", pieces(data), batch=64)
        (src_payloads, src_dense), (dst_payloads, dst_dense) = await stored(src, "kb"), await stored(dst, "kb")
    finally:
        await src.aclose()
        await dst.aclose()
    in_file = [json.loads(line)["id"] for line in gzip.decompress(data).splitlines()[1:-1]]
    assert dst.upserts == [in_file[i:i + 64] for i in range(0, N, 64)]
    assert dst_payloads == src_payloads
    assert sorted(pid for pid, (_, s) in dst_payloads.items() if s is None) == sorted(
        chunk(i).id_in("kb") for i in range(0, N, 4))
    assert same_dense(dst_dense, src_dense)


async def int8_export(root: Path) -> bytes:
    """An export of ``kb`` after ``ragserve optimize kb --int8`` (with the store closed, as the command needs)."""
    store = await EdgeStore.open(root, write_batch=64)
    try:
        await seed(store)
    finally:
        await store.aclose()
    assert optimize_collection(root, "kb", quantization="int8", progress=lambda _: None)["indexed"] == N
    store = await EdgeStore.open(root, write_batch=64)
    try:
        assert (await store.describe("kb")).quantization == "int8"
        return await export_bytes(store)
    finally:
        await store.aclose()


def resealed(data: bytes, header: Any) -> bytes:
    """The file with its header edited by ``header`` and its trailer's sha256 made to match again."""
    lines = gzip.decompress(data).split(b"\n")[:-1]
    first = json.dumps(header(json.loads(lines[0])), ensure_ascii=False, separators=(",", ":")).encode()
    body = b"".join(line + b"\n" for line in [first, *lines[1:-1]])
    trailer = json.dumps({"end": True, "points": len(lines) - 2, "sha256": hashlib.sha256(body).hexdigest()})
    return gzip.compress(body + trailer.encode() + b"\n")


async def test_an_int8_collection_imports_as_int8_into_the_embedded_store(tmp_path: Path) -> None:
    """The header carries ``quantization``; the import records it on the target, and the target's next
    ``ragserve optimize`` (no ``--int8``) builds its int8 copy: the collection ends as int8 as its source was."""
    data = await int8_export(tmp_path / "src")
    dst = await EdgeStore.open(tmp_path / "dst", write_batch=64)
    try:
        result = await Importer(dst, MODEL).run("kb", pieces(data))
        described = await dst.get_collection("kb")
        dense = await dst.query("kb", dense=QUERY.tolist(), limit=5)
    finally:
        await dst.aclose()
    optimized = optimize_collection(tmp_path / "dst", "kb", progress=lambda _: None)

    assert json.loads(gzip.decompress(data).split(b"\n", 1)[0])["quantization"] == "int8"
    assert (result.quantization, described.quantization, described.importing, described.points) == (
        "int8", "int8", None, N)
    assert len(dense) == 5  # searchable at once: exact over the segment not yet quantized
    assert (optimized["mode"], optimized["indexed"], optimized["points"]) == ("int8", N, N)


async def test_an_int8_collection_imports_unquantized_where_the_backend_records_none(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The server backend: ragserve does not manage a Qdrant server's quantization, so the import stores every
    point as it would without the field, and says what it left out."""
    data = await int8_export(tmp_path / "src")
    dst = await open_store("server", tmp_path)
    try:
        with caplog.at_level(logging.WARNING, logger="ragserve.transfer"):
            result = await Importer(dst, MODEL).run("kb", pieces(data))
        described = await dst.get_collection("kb")
        ids = sorted([p.id async for page in dst.export_points("kb") for p in page])
    finally:
        await dst.aclose()
    assert (result.quantization, described.quantization, described.importing) == (None, None, None)
    assert ids == sorted(chunk(i).id_in("kb") for i in range(N))
    assert [r.getMessage() for r in caplog.records] == [
        "import into 'kb': the export's int8 quantization is not carried over (the server store does not record "
        "one); its points are stored and searched unquantized"]


async def test_a_file_without_quantization_imports_as_before(tmp_path: Path) -> None:
    """A file written before the header carried ``quantization``: the import records none."""
    data = resealed(await int8_export(tmp_path / "src"), lambda h: {k: v for k, v in h.items() if k != "quantization"})
    dst = await EdgeStore.open(tmp_path / "dst", write_batch=64)
    try:
        result = await Importer(dst, MODEL).run("kb", pieces(data))
        described = await dst.get_collection("kb")
    finally:
        await dst.aclose()
    assert (result.points, result.quantization, described.quantization, described.points) == (N, None, None, N)
