"""One contract, two backends: Qdrant Edge (the embedded engine) and the server backend's code running on
qdrant-client's local mode (the stand-in for a Qdrant server, which cannot be installed here).

Each test runs the same operations on both and checks the answers against an independent oracle computed
here (numpy cosine, the BM25/IDF formula, the RRF formula, a Python predicate for filters), and the two
backends against each other: ids, order and scores within a tolerance."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient

from service.sparse.config import SparseConfig
from service.store.base import VectorStore
from service.store.edge import EdgeStore
from service.store.errors import CollectionExists, CollectionNotFound
from service.store.proxy import ProcessStore
from service.store.qdrant_server import ServerStore
from service.store.types import Chunk, Filter, Fusion, Match, MatchAny, Range, SparseVector, point_id

DIM = 8
N = 40
TOL = 1e-4
rng = np.random.default_rng(7)
VECTORS = rng.normal(size=(N, DIM)).astype(np.float32)
QUERY = rng.normal(size=DIM).astype(np.float32)
TERMS = [sorted(rng.choice(np.arange(1, 13), size=int(rng.integers(1, 6)), replace=False).tolist()) for _ in range(N)]
WEIGHTS = [rng.uniform(0.5, 2.0, size=len(t)).round(4).tolist() for t in TERMS]  # no ties between documents
DOCS = [
    {"doc_id": f"d{i:02d}", "meta": {"lang": ["en", "de", "fr"][i % 3], "year": 2000 + i % 10, "draft": i % 4 == 0,
                                     "score": i / 4}, "source": f"s{i % 2}"}
    for i in range(N)
]


async def open_backend(kind: str, root: Path) -> VectorStore:
    if kind == "edge":
        return await EdgeStore.open(root / "edge", write_batch=16)
    if kind == "edge-process":  # the same engine behind the process boundary the service uses by default
        return await ProcessStore.open(root / "edge-process", write_batch=16)
    return ServerStore(AsyncQdrantClient(location=":memory:"))


@pytest.fixture(params=["edge", "edge-process", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStore]:
    s = await open_backend(request.param, tmp_path)
    yield s
    await s.aclose()


@pytest.fixture
async def both(tmp_path: Path) -> AsyncIterator[list[VectorStore]]:
    stores = [await open_backend(kind, tmp_path) for kind in ("edge", "edge-process", "server")]
    for s in stores:
        await seed(s)
    yield stores
    for s in stores:
        await s.aclose()


def chunk(i: int, **kw: Any) -> Chunk:
    d = DOCS[i]
    return Chunk(d["doc_id"], 0, f"text {i}", d["meta"], content_hash=kw.get("h", "h1"), source=d["source"])


async def seed(s: VectorStore, name: str = "c") -> None:
    await s.create_collection(name, dimensions=DIM, model="m", filter_fields={"lang": "keyword", "year": "integer"},
                              sparse=SparseConfig())
    await s.upsert(name, [chunk(i) for i in range(N)], VECTORS.tolist(),
                   [SparseVector(TERMS[i], WEIGHTS[i]) for i in range(N)])


def ids(hits: list[Any]) -> list[str]:
    return [h.doc_id for h in hits]


def cosine_oracle(rows: list[int], k: int) -> list[tuple[str, float]]:
    m = VECTORS[rows] / np.linalg.norm(VECTORS[rows], axis=1, keepdims=True)
    scores = m @ (QUERY / np.linalg.norm(QUERY))
    order = np.argsort(-scores)[:k]
    return [(DOCS[rows[j]]["doc_id"], float(scores[j])) for j in order]


def bm25_oracle(rows: list[int], query_terms: list[int]) -> dict[str, float]:
    """Qdrant's IDF modifier: idf(t) = ln((N - n + 0.5) / (n + 0.5) + 1), times the stored weights."""
    n_docs = len(rows)
    out: dict[str, float] = {}
    for t in query_terms:
        n = sum(1 for r in rows if t in TERMS[r])
        idf = math.log((n_docs - n + 0.5) / (n + 0.5) + 1)
        for r in rows:
            if t in TERMS[r]:
                w = WEIGHTS[r][TERMS[r].index(t)]
                out[DOCS[r]["doc_id"]] = out.get(DOCS[r]["doc_id"], 0.0) + idf * w
    return out


def assert_same(*answers: list[Any]) -> None:
    """Every backend's answer as the first's."""
    for other in answers[1:]:
        _assert_same(answers[0], other)


def _assert_same(a: list[Any], b: list[Any]) -> None:
    """Same ids in the same order with the same scores; points tied on score may come in either order."""
    assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=TOL)
    for hits in (a, b):
        assert all(x.score >= y.score for x, y in zip(hits, hits[1:], strict=False))
    assert sorted((round(h.score, 3), h.doc_id) for h in a) == sorted((round(h.score, 3), h.doc_id) for h in b)


async def test_collections_lifecycle(store: VectorStore) -> None:
    info = await store.create_collection("c", dimensions=DIM, model="m", filter_fields={"lang": "keyword"},
                                         sparse=SparseConfig(avg_len=100))
    assert (info.dimensions, info.model, info.filter_fields, info.sparse) == (DIM, "m", {"lang": "keyword"},
                                                                              SparseConfig(avg_len=100))
    await store.create_collection("b", dimensions=4, model="m2")
    with pytest.raises(CollectionExists):
        await store.create_collection("c", dimensions=DIM, model="m")
    listed = await store.list_collections()
    assert [(c.name, c.dimensions, c.points, c.sparse is not None) for c in listed] == [
        ("b", 4, 0, False), ("c", DIM, 0, True)]
    described = await store.describe("c")
    assert described.sparse == SparseConfig(avg_len=100) and described.filter_fields == {"lang": "keyword"}
    await store.upsert("b", [chunk(0), chunk(1)], [[1, 0, 0, 0], [0, 1, 0, 0]])
    assert (await store.get_collection("b")).points == 2
    await store.delete_collection("b")
    for op in (store.describe("b"), store.get_collection("b"), store.delete_collection("b"), store.count("b"),
               store.query("b", dense=[1, 0, 0, 0], limit=1)):
        with pytest.raises(CollectionNotFound):
            await op
    assert [c.name for c in await store.list_collections()] == ["c"]


async def test_dense_matches_numpy_cosine(both: list[VectorStore]) -> None:
    expected = cosine_oracle(list(range(N)), 10)
    results = [await s.query("c", dense=QUERY.tolist(), limit=10) for s in both]
    for hits in results:
        assert [(h.doc_id, round(h.score, 4)) for h in hits] == [(d, round(v, 4)) for d, v in expected]
        assert hits[0].id == point_id("c", hits[0].doc_id, 0) and hits[0].text == f"text {int(hits[0].doc_id[1:])}"
        assert hits[0].metadata == DOCS[int(hits[0].doc_id[1:])]["meta"] and hits[0].source is not None
    assert_same(*results)


async def test_sparse_is_bm25_with_live_idf(both: list[VectorStore]) -> None:
    q = SparseVector([2, 5, 9], [1.0, 1.0, 1.0])
    for rows, label in ((list(range(N)), "all"), (list(range(10, N)), "after deleting d00..d09")):
        expected = bm25_oracle(rows, q.indices)
        top = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        results = [await s.query("c", sparse=q, limit=10) for s in both]
        for hits in results:
            got = {h.doc_id: h.score for h in hits}
            assert got == pytest.approx(dict(top), abs=TOL), label
        assert_same(*results)
        for s in both:
            await s.delete_documents("c", [f"d{i:02d}" for i in range(10)])


@pytest.mark.parametrize("k,weights", [(2, (1.0, 1.0)), (2, (1.0, 1.5)), (60, (2.0, 0.5))])
async def test_hybrid_rrf_formula(both: list[VectorStore], k: int, weights: tuple[float, float]) -> None:
    q = SparseVector([2, 5, 9], [1.0, 1.0, 1.0])
    fusion = Fusion("rrf", prefetch_limit=15, rrf_k=k, dense_weight=weights[0], sparse_weight=weights[1])
    results = []
    for s in both:
        dense = await s.query("c", dense=QUERY.tolist(), limit=15)
        sparse = await s.query("c", sparse=q, limit=15)
        expected: dict[str, float] = {}
        for hits, w in ((dense, weights[0]), (sparse, weights[1])):
            for pos, h in enumerate(hits):  # Qdrant's weighted RRF: 1 / ((rank + 1) / w + k - 1)
                expected[h.doc_id] = expected.get(h.doc_id, 0.0) + 1 / ((pos + 1) / w + k - 1)
        fused = await s.query("c", dense=QUERY.tolist(), sparse=q, limit=8, fusion=fusion)
        assert {h.doc_id: h.score for h in fused} == pytest.approx(
            dict(sorted(expected.items(), key=lambda kv: -kv[1])[:8]), abs=TOL)
        results.append(fused)
    assert_same(*results)


async def test_hybrid_dbsf_agrees(both: list[VectorStore]) -> None:
    q = SparseVector([2, 5, 9], [1.0, 1.0, 1.0])
    results = [await s.query("c", dense=QUERY.tolist(), sparse=q, limit=10, fusion=Fusion("dbsf", prefetch_limit=20))
               for s in both]
    assert_same(*results)
    assert len({h.doc_id for h in results[0]}) == 10


FILTERS: list[tuple[Filter, Any]] = [
    (Filter(must=(Match("metadata.lang", "de"),)), lambda d: d["meta"]["lang"] == "de"),
    (Filter(must=(Match("metadata.year", 2003),)), lambda d: d["meta"]["year"] == 2003),
    (Filter(must=(Match("metadata.draft", True),)), lambda d: d["meta"]["draft"]),
    (Filter(must=(MatchAny("metadata.lang", ("en", "fr")),)), lambda d: d["meta"]["lang"] in ("en", "fr")),
    (Filter(must=(MatchAny("metadata.year", (2001, 2008)),)), lambda d: d["meta"]["year"] in (2001, 2008)),
    (Filter(must=(Range("metadata.year", gte=2002, lt=2005),)), lambda d: 2002 <= d["meta"]["year"] < 2005),
    (Filter(must=(Range("metadata.score", gt=2.5, lte=7.25),)), lambda d: 2.5 < d["meta"]["score"] <= 7.25),
    (Filter(must=(Match("doc_id", "d07"),)), lambda d: d["doc_id"] == "d07"),
    (Filter(must=(Match("metadata.lang", "en"), Range("metadata.year", gt=2004))),
     lambda d: d["meta"]["lang"] == "en" and d["meta"]["year"] > 2004),
    (Filter(must_not=(Match("source", "s0"),)), lambda d: d["source"] != "s0"),
    (Filter(should=(Match("metadata.lang", "fr"), Match("metadata.year", 2000))),
     lambda d: d["meta"]["lang"] == "fr" or d["meta"]["year"] == 2000),
    (Filter(must=(Match("metadata.lang", "xx"),)), lambda d: False),
]


@pytest.mark.parametrize("index", range(len(FILTERS)))
async def test_every_filter_form(both: list[VectorStore], index: int) -> None:
    flt, predicate = FILTERS[index]
    rows = [i for i, d in enumerate(DOCS) if predicate(d)]
    expected = cosine_oracle(rows, 5) if rows else []
    q = SparseVector([2, 5, 9], [1.0, 1.0, 1.0])
    results = []
    for s in both:
        hits = await s.query("c", dense=QUERY.tolist(), limit=5, query_filter=flt)
        assert [h.doc_id for h in hits] == [d for d, _ in expected]
        assert await s.count("c", flt) == len(rows)
        hybrid = await s.query("c", dense=QUERY.tolist(), sparse=q, limit=5, query_filter=flt)
        assert {h.doc_id for h in hybrid} <= {DOCS[r]["doc_id"] for r in rows}
        results.append(hybrid)
    assert_same(*results)


async def test_replace_delete_and_states(store: VectorStore) -> None:
    await seed(store)
    three = [Chunk("multi", i, f"part {i}", {}, content_hash="v1", chunk_count=3, source="s9") for i in range(3)]
    await store.replace_documents("c", three, VECTORS[:3].tolist(), [SparseVector([1], [1.0])] * 3)
    states = await store.doc_states("c", source="s9")
    assert states == {"multi": states["multi"]} and states["multi"].complete
    assert (states["multi"].content_hash, sorted(states["multi"].chunk_indices)) == ("v1", [0, 1, 2])

    one = [Chunk("multi", 0, "short now", {}, content_hash="v2", chunk_count=1, source="s9")]
    await store.replace_documents("c", one, VECTORS[3:4].tolist(), [SparseVector([1], [1.0])])
    states = await store.doc_states("c", doc_ids=["multi", "d01", "nope"])
    assert set(states) == {"multi", "d01"}
    assert (states["multi"].content_hash, sorted(states["multi"].chunk_indices), states["multi"].complete) == (
        "v2", [0], True)
    hits = await store.query("c", dense=VECTORS[3].tolist(), limit=1, query_filter=Filter(must=(Match("doc_id", "multi"),)))
    assert [(h.chunk_index, h.text) for h in hits] == [(0, "short now")]

    # a crash between upsert and delete leaves two versions: never "complete"
    await store.upsert("c", [Chunk("multi", 1, "stale", {}, content_hash="v1", chunk_count=3, source="s9")],
                       VECTORS[:1].tolist(), [SparseVector([1], [1.0])])
    assert (await store.doc_states("c", doc_ids=["multi"]))["multi"].complete is False

    before = await store.count("c")
    await store.delete_documents("c", ["d01", "d03"])
    assert await store.count("c") == before - 2
    assert set(await store.doc_states("c", doc_ids=["d01", "d03", "d05"])) == {"d05"}
    assert await store.doc_states("c", doc_ids=[]) == {}

    s1 = {d for d, _ in (await store.doc_states("c", source="s1")).items()}
    assert s1 == {f"d{i:02d}" for i in range(1, N, 2)} - {"d01", "d03"}
    await store.delete_source("c", "s1")
    assert await store.doc_states("c", source="s1") == {}
    assert await store.count("c", Filter(must=(Match("source", "s0"),))) == N // 2
    assert (await store.get_collection("c")).points == N // 2 + 2  # s0's documents, plus "multi" (two chunks)


@pytest.mark.parametrize("dims", [32, 1024])
async def test_matryoshka_sizes(store: VectorStore, dims: int) -> None:
    await store.create_collection("m", dimensions=dims, model="qwen3", sparse=None)
    vectors = np.random.default_rng(dims).normal(size=(20, dims))
    await store.upsert("m", [Chunk(f"x{i}", 0, "t", {}) for i in range(20)], vectors.tolist())
    hits = await store.query("m", dense=vectors[13].tolist(), limit=3)
    assert hits[0].doc_id == "x13" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert (await store.describe("m")).dimensions == dims


async def test_one_upsert_stores_points_with_and_without_a_sparse_vector(store: VectorStore) -> None:
    """A batch may mix points with a sparse vector and points without one (an import of a collection that has
    both): one upsert stores each as given, and a BM25 query finds only those with one."""
    await store.create_collection("c", dimensions=DIM, model="m", sparse=SparseConfig())
    given = [SparseVector(TERMS[i], WEIGHTS[i]) if i % 3 else None for i in range(N)]
    await store.upsert("c", [chunk(i) for i in range(N)], VECTORS.tolist(), given)

    points = {p.id: p for page in [page async for page in store.export_points("c")] for p in page}
    assert sorted(points) == sorted(point_id("c", DOCS[i]["doc_id"], 0) for i in range(N))
    for i in range(N):
        p = points[point_id("c", DOCS[i]["doc_id"], 0)]
        s = given[i]
        assert (p.sparse and (p.sparse.indices, np.float32(p.sparse.values).tolist())) == (
            s and (s.indices, np.float32(s.values).tolist())), i
        assert p.payload["text"] == f"text {i}"
    q = SparseVector([2, 5, 9], [1.0, 1.0, 1.0])
    with_sparse = [i for i in range(N) if given[i] is not None]
    expected = bm25_oracle(with_sparse, q.indices)
    hits = await store.query("c", sparse=q, limit=N)
    assert {h.doc_id: h.score for h in hits} == pytest.approx(expected, abs=TOL)
    dense = await store.query("c", dense=QUERY.tolist(), limit=N)
    assert sorted(h.doc_id for h in dense) == sorted(d["doc_id"] for d in DOCS)
