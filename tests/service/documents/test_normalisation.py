"""A collection's BM25 avg_len follows its own documents: estimated from the first batch, kept stable, and
re-encoded from the stored texts when the running average drifts. On both store backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.documents.normalisation import MIN_DOCUMENTS, SparseNormaliser
from service.sparse.config import SparseConfig, SparseStats
from service.store.base import VectorStore
from service.store.types import Chunk
from tests.service.store.test_contract import open_backend

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"]


@pytest.fixture(params=["edge", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStore]:
    s = await open_backend(request.param, tmp_path)
    yield s
    await s.aclose()


def text(i: int, length: int) -> str:
    return " ".join(WORDS[(i + j) % len(WORDS)] for j in range(length))


async def write(store: VectorStore, name: str, start: int, lengths: list[int]) -> None:
    texts = [text(start + k, n) for k, n in enumerate(lengths)]
    vectors = await SparseNormaliser(store).vectors(name, texts)
    assert vectors is not None
    chunks = [Chunk(f"d{start + k}", 0, t, {}) for k, t in enumerate(texts)]
    await store.upsert(name, chunks, [[1.0, float(start + k)] for k in range(len(texts))], vectors)


async def scores(store: VectorStore, name: str, query: str) -> dict[str, float]:
    from service.sparse.bm25 import encoder

    info = await store.describe(name)
    assert info.sparse is not None
    hits = await store.query(name, sparse=encoder(info.sparse).encode_query(query), limit=1000)
    return {h.doc_id: h.score for h in hits}


async def test_first_batch_sets_avg_len_and_later_batches_keep_it(store: VectorStore) -> None:
    await store.create_collection("c", dimensions=2, model="m", sparse=SparseConfig())
    await write(store, "c", 0, [2, 4, 6])
    info = await store.describe("c")
    assert info.sparse is not None and info.sparse.avg_len == 4.0
    assert info.sparse_stats == SparseStats(documents=3, terms=12, estimated=True)
    await write(store, "c", 3, [9, 9])  # the running mean moves, but too few documents to re-encode
    info = await store.describe("c")
    assert info.sparse is not None and info.sparse.avg_len == 4.0 and info.sparse_stats.documents == 5  # type: ignore[union-attr]
    listed = {c.name: c for c in await store.list_collections()}
    assert listed["c"].sparse == info.sparse  # persisted, not only cached


async def test_drift_re_encodes_every_stored_vector_from_its_text(store: VectorStore) -> None:
    await store.create_collection("grown", dimensions=2, model="m", sparse=SparseConfig())
    await write(store, "grown", 0, [2] * (MIN_DOCUMENTS + 6))  # avg_len 2
    await write(store, "grown", 100, [10] * 100)  # the running mean becomes (140 + 1000) / 170
    info = await store.describe("grown")
    final = 1140 / 170
    assert info.sparse is not None and info.sparse.avg_len == pytest.approx(final)

    await store.create_collection("fresh", dimensions=2, model="m", sparse=SparseConfig(avg_len=final))
    await write(store, "fresh", 0, [2] * (MIN_DOCUMENTS + 6))
    await write(store, "fresh", 100, [10] * 100)
    for query in ("alpha", "golf kilo", "bravo delta hotel"):
        grown, fresh = await scores(store, "grown", query), await scores(store, "fresh", query)
        assert grown == pytest.approx(fresh, rel=1e-5) and len(grown) > 100


async def test_a_configured_avg_len_is_never_changed(store: VectorStore) -> None:
    await store.create_collection("c", dimensions=2, model="m", sparse=SparseConfig(avg_len=3))
    await write(store, "c", 0, [20] * (MIN_DOCUMENTS + 1))
    info = await store.describe("c")
    assert info.sparse is not None and info.sparse.avg_len == 3
    assert info.sparse_stats == SparseStats(documents=MIN_DOCUMENTS + 1, terms=20 * (MIN_DOCUMENTS + 1))
