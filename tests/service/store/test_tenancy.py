"""Tenants sharing one collection, on both backends: separate documents under one id, writes and deletes
that reach only their own tenant's chunks, reads filtered to the tenant, BM25 counted over the tenant, and
the ``is_tenant`` index."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import qdrant_edge as qe

from service.sparse.config import SparseConfig
from service.store.base import VectorStore
from service.store.edge import EdgeStore
from service.store.tenancy import Tenant, read_scope, write_scope
from service.store.types import TENANT, Chunk, Filter, HasId, SparseVector, both, point_id
from tests.service.store.test_contract import open_backend

A, B = Tenant("org", "a"), Tenant("org", "b")


@pytest.fixture(params=["edge", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStore]:
    s = await open_backend(request.param, tmp_path)
    await s.create_collection("c", dimensions=2, model="m", sparse=SparseConfig())
    yield s
    await s.aclose()


def doc(tenant: Tenant | None, text: str, h: str, *, doc_id: str = "x") -> Chunk:
    meta = tenant.stamp({"lang": "en"}) if tenant else {"lang": "en"}
    return Chunk(doc_id, 0, text, meta, content_hash=h, tenant=tenant.namespace if tenant else None, source="s")


async def test_tenant_index_may_be_asked_for_again(store: VectorStore) -> None:
    await store.ensure_tenant_index("c", "org")
    await store.ensure_tenant_index("c", "org")
    await write(store, A, "a", "1")
    assert await texts(store, A) == ["a"]


async def write(s: VectorStore, tenant: Tenant | None, text: str, h: str, *, doc_id: str = "x",
                terms: tuple[int, ...] = (1,)) -> None:
    await s.replace_documents("c", [doc(tenant, text, h, doc_id=doc_id)], [[1.0, 0.0]],
                              [SparseVector(list(terms), [1.0] * len(terms))], scope=write_scope(tenant))


async def texts(s: VectorStore, tenant: Tenant | None) -> list[str]:
    hits = await s.query("c", dense=[1.0, 0.0], limit=10, query_filter=read_scope(tenant))
    return sorted(h.text for h in hits)


async def test_one_id_is_one_document_per_tenant(store: VectorStore) -> None:
    assert point_id("c", "x", 0, A.namespace) != point_id("c", "x", 0, B.namespace) != point_id("c", "x", 0)
    assert point_id("c", "x", 0, None) == point_id("c", "x", 0)  # untenanted ids are unchanged
    await write(store, A, "a v1", "1")
    await write(store, B, "b v1", "1")
    await write(store, None, "shared v1", "1")
    assert await texts(store, A) == ["a v1"] and await texts(store, B) == ["b v1"]
    assert await texts(store, None) == ["a v1", "b v1", "shared v1"]  # an untenanted read sees every chunk

    await write(store, A, "a v2", "2")  # replaces A's version only: B's and the untenanted one stay
    await write(store, None, "shared v2", "2")
    assert await texts(store, None) == ["a v2", "b v1", "shared v2"]
    hits = await store.query("c", dense=[1.0, 0.0], limit=10, query_filter=read_scope(A))
    assert [(h.id, h.metadata) for h in hits] == [(point_id("c", "x", 0, "org=a"), {"lang": "en", "org": "a"})]

    assert set(await store.doc_states("c", doc_ids=["x"], scope=write_scope(B))) == {"x"}
    await store.delete_documents("c", ["x"], scope=write_scope(B))
    assert await store.doc_states("c", doc_ids=["x"], scope=write_scope(B)) == {}
    assert await texts(store, None) == ["a v2", "shared v2"]
    await store.delete_documents("c", ["x"], scope=write_scope(None))  # untenanted: never a tenant's
    assert await texts(store, None) == ["a v2"]
    await store.delete_source("c", "s", scope=write_scope(B))
    assert await texts(store, None) == ["a v2"]


async def test_a_tenants_bm25_counts_its_own_documents(store: VectorStore) -> None:
    # A holds 2 documents, one with term 7; B holds 6, all with term 7. Over A's corpus term 7 is rare.
    await write(store, A, "a7", "1", doc_id="a7", terms=(7,))
    await write(store, A, "a8", "1", doc_id="a8", terms=(8,))
    for i in range(6):
        await write(store, B, f"b{i}", "1", doc_id=f"b{i}", terms=(7,))
    q = SparseVector([7], [1.0])

    def idf(n_docs: int, n: int) -> float:
        return math.log((n_docs - n + 0.5) / (n + 0.5) + 1)

    scope = read_scope(A)
    own = await store.query("c", sparse=q, limit=5, query_filter=scope, idf_corpus=scope)
    everyone = await store.query("c", sparse=q, limit=5, query_filter=scope)
    assert [(h.text, h.score) for h in own] == [("a7", pytest.approx(idf(2, 1), abs=1e-4))]
    assert [(h.text, h.score) for h in everyone] == [("a7", pytest.approx(idf(8, 7), abs=1e-4))]


async def test_tenant_index_is_created_once_and_is_a_tenant_index(tmp_path: Path) -> None:
    """On Edge, where the index is visible (qdrant-client's local mode, the server stand-in, keeps no
    payload indexes, so the server backend's call is only seen to be accepted, in the tests above)."""
    store = await EdgeStore.open(tmp_path / "edge")
    try:
        await store.create_collection("c", dimensions=2, model="m", sparse=SparseConfig())
        assert "metadata.org" not in store._get("c").shard.info().payload_schema
        await store.ensure_tenant_index("c", "org")
        await store.ensure_tenant_index("c", "org")  # idempotent
        await write(store, A, "a", "1")
        assert await texts(store, A) == ["a"]
        schema = store._get("c").shard.info().payload_schema
        assert schema["metadata.org"].params.is_tenant is True
        assert schema["metadata.org"].data_type == qe.PayloadSchemaType.Keyword
        assert schema[TENANT].data_type == qe.PayloadSchemaType.Keyword
    finally:
        await store.aclose()



@pytest.mark.parametrize("kind", ["edge", "edge-process", "server"])
async def test_read_chunks_reads_by_point_id_within_the_readers_scope(kind: str, tmp_path: Path) -> None:
    """The context assembler's neighbour read: a hit names its document's other chunks' point ids (its tenant
    is part of them), and the reading key's scope still applies, so one tenant never reads another's chunk of
    the same document id."""
    store = await open_backend(kind, tmp_path)
    try:
        await store.create_collection("c", dimensions=2, model="m")
        for tenant, name in ((A, "a"), (B, "b"), (None, "plain")):
            chunks = [Chunk("x", i, f"{name} {i}", tenant.stamp({}) if tenant else {}, content_hash="1",
                            chunk_count=3, tenant=tenant.namespace if tenant else None, source="s") for i in range(3)]
            await store.replace_documents("c", chunks, [[1.0, 0.0]] * 3, scope=write_scope(tenant))
        [hit] = await store.query("c", dense=[1.0, 0.0], limit=1, query_filter=read_scope(A))
        assert (hit.text[:2], hit.tenant) == ("a ", "org=a")
        wanted = [hit.point_id_of("c", i) for i in (0, 1, 2, 7)]  # 7 does not exist: simply not returned
        got = await store.read_chunks("c", Filter(must=(HasId(tuple(wanted)),)), limit=10)
        assert sorted((h.id, h.text, h.chunk_index, h.tenant, h.score) for h in got) == sorted(
            (point_id("c", "x", i, "org=a"), f"a {i}", i, "org=a", 0.0) for i in range(3))
        # B's key asking for A's ids gets nothing
        scoped = both(Filter(must=(HasId(tuple(wanted)),)), read_scope(B))
        assert scoped is not None and await store.read_chunks("c", scoped, limit=10) == []
        plain = tuple(point_id("c", "x", i) for i in range(3))
        got = await store.read_chunks("c", Filter(must=(HasId(plain),)), limit=2)
        assert len(got) == 2 and {h.text for h in got} < {"plain 0", "plain 1", "plain 2"}
        assert {h.tenant for h in got} == {None}
    finally:
        await store.aclose()
