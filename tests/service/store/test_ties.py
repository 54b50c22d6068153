"""Tied scores in one order, score descending then point id ascending, on every backend
(:mod:`service.store.ties`): on a collection and on its imported copy (another segment layout), on one query
asked many times, and across the cut, where the engine would choose which of the tied points come back.

The data has no ties within the dense list nor within the BM25 list (random vectors and weights), so each hybrid
list ranks its points the same way on every copy; what ties is the RRF sum: a point ranked r by dense alone scores
the same as one ranked r by BM25 alone. The flat collection ties outright: every point has the same vectors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.profiles import EmbeddingModel
from service.sparse.config import SparseConfig, SparseStats
from service.store.base import VectorStore
from service.store.types import Chunk, Fusion, Hit, SparseVector
from service.transfer.exporter import start_export
from service.transfer.importer import Importer
from tests.service.store.test_contract import open_backend

DIM = 16
N = 300
MODEL = EmbeddingModel("test-model", DIM, 512)
rng = np.random.default_rng(37)
VECTORS = rng.normal(size=(N, DIM)).astype(np.float32)
TERMS = [sorted(rng.choice(np.arange(1, 60), size=int(rng.integers(1, 6)), replace=False).tolist()) for _ in range(N)]
WEIGHTS = [rng.uniform(0.5, 2.0, size=len(t)).round(4).tolist() for t in TERMS]
QUERY = rng.normal(size=DIM).astype(np.float32).tolist()
SPARSE_QUERY = SparseVector([2, 5, 9, 14, 21, 33], [1.0] * 6)
INSERTION = rng.permutation(N).tolist()
"""The seeding order: not the ids' order, so that the engine's own order of tied points is not the id order."""
MODES: dict[str, dict[str, Any]] = {
    "dense": {"dense": QUERY},
    "sparse": {"sparse": SPARSE_QUERY},
    "rrf": {"dense": QUERY, "sparse": SPARSE_QUERY},
    "dbsf": {"dense": QUERY, "sparse": SPARSE_QUERY, "fusion": Fusion("dbsf")},
}
BACKENDS = ["edge", "edge-process", "server"]
ENGINES = ["edge", "server"]
"""The engines; the store process adds no order of its own (its ``query`` is the base class's, over its child's
engine calls), so it runs the imported-copy test and the others run in-process (the session's spawn cap)."""


def chunk(i: int) -> Chunk:
    return Chunk(f"doc{i:03d}", 0, f"text {i}", {}, content_hash="h", chunk_count=1)


async def seed(store: VectorStore, name: str, vectors: np.ndarray, sparse: list[SparseVector]) -> None:
    """The points in :data:`INSERTION` order, a few per write, so the engine holds them in several pieces."""
    await store.create_collection(name, dimensions=DIM, model=MODEL.name, sparse=SparseConfig())
    await store.set_sparse_settings(name, SparseConfig(), SparseStats(documents=N, terms=3 * N, estimated=True))
    for start in range(0, N, 23):
        rows = INSERTION[start:start + 23]
        await store.upsert(name, [chunk(i) for i in rows], vectors[rows].tolist(), [sparse[i] for i in rows])


def random_sparse() -> list[SparseVector]:
    return [SparseVector(TERMS[i], WEIGHTS[i]) for i in range(N)]


@pytest.fixture(params=ENGINES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStore]:
    s = await open_backend(request.param, tmp_path / "a")
    await seed(s, "kb", VECTORS, random_sparse())
    yield s
    await s.aclose()


def ids(hits: list[Hit]) -> list[str]:
    return [h.id for h in hits]


def in_tie_order(hits: list[Hit]) -> bool:
    return ids(hits) == ids(sorted(hits, key=lambda h: (-h.score, h.id)))


def tied(hits: list[Hit]) -> bool:
    return any(a.score == b.score for a, b in zip(hits, hits[1:], strict=False))


async def imported_copy(store: VectorStore, kind: str, root: Path) -> VectorStore:
    """The collection exported and imported under the same name (the same point ids) into a new store of the
    same kind, which writes it in other batches: another segment layout."""
    data = b"".join([piece async for piece in await start_export(store, "kb", page_size=41)])

    async def body() -> AsyncIterator[bytes]:
        for i in range(0, len(data), 997):
            yield data[i:i + 997]

    copy = await open_backend(kind, root)
    await Importer(copy, MODEL).run("kb", body())
    return copy


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_collection_and_its_imported_copy_order_ties_alike(tmp_path: Path, kind: str) -> None:
    store = await open_backend(kind, tmp_path / "a")
    await seed(store, "kb", VECTORS, random_sparse())
    copy = await imported_copy(store, kind, tmp_path / "b")
    try:
        for mode, query in MODES.items():
            for limit in (10, 25, 40, 60):
                here = await store.query("kb", limit=limit, **query)
                there = await copy.query("kb", limit=limit, **query)
                assert ids(here) == ids(there), (mode, limit)
                assert in_tie_order(here), (mode, limit)
        assert tied(await store.query("kb", limit=60, **MODES["rrf"]))  # the RRF query meets ties
    finally:
        await store.aclose()
        await copy.aclose()


@pytest.mark.parametrize("mode", MODES)
async def test_one_tied_query_asked_many_times_answers_one_list(store: VectorStore, mode: str) -> None:
    first = await store.query("kb", limit=60, **MODES[mode])
    for _ in range(20):
        assert ids(await store.query("kb", limit=60, **MODES[mode])) == ids(first)
    assert in_tie_order(first)


@pytest.mark.parametrize("mode", MODES)
async def test_a_smaller_limit_answers_a_prefix_of_a_larger_one(store: VectorStore, mode: str) -> None:
    """Pagination's premise: wherever the cut falls, in a tie group or not, the first hits are the same ones
    (all these limits are under the fused lists' depth, so the fused scores are the same)."""
    whole = ids(await store.query("kb", limit=80, **MODES[mode]))
    for limit in range(1, 80):
        assert ids(await store.query("kb", limit=limit, **MODES[mode])) == whole[:limit], limit


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize("mode", ["dense", "sparse"])
async def test_a_tie_group_larger_than_the_first_fetch_is_cut_by_id(tmp_path: Path, kind: str, mode: str) -> None:
    """Every point has the same vectors, so every point ties: the answer is the lowest ids, which the store
    can only know by asking the engine again, past its first extra hits, until the group ends."""
    flat = await open_backend(kind, tmp_path)
    same = np.repeat(VECTORS[:1], N, axis=0)
    await seed(flat, "kb", same, [SparseVector([2, 5], [1.0, 1.5])] * N)
    try:
        hits = await flat.query("kb", limit=10, **MODES[mode])
    finally:
        await flat.aclose()
    assert ids(hits) == sorted(chunk(i).id_in("kb") for i in range(N))[:10]
