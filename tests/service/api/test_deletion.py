"""Delete by filter on the real app and store: exactly the matching documents go, whole; a dry run counts
and changes nothing; an empty filter is refused unless ``all`` says so."""

from __future__ import annotations

import httpx

from service.config import Settings
from service.store.types import Chunk
from tests.support.app import app_client

DIM = 384


def _vec(i: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(DIM)]


DOCS = [
    {"id": "a", "text": "alpha", "metadata": {"tag": "old", "year": 2018}, "vector": _vec(0)},
    {"id": "b", "text": "beta", "metadata": {"tag": "old", "year": 2021}, "vector": _vec(1)},
    {"id": "c", "text": "gamma", "metadata": {"tag": "new", "year": 2019}, "vector": _vec(2)},
    {"id": "d", "text": "delta", "metadata": {"tag": "new", "year": 2024}, "vector": _vec(3)},
]


async def _seed(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/collections", json={"name": "kb", "sparse": False})
    assert r.status_code == 201, r.text
    r = await client.post("/v1/collections/kb/documents", json={"documents": DOCS})
    assert r.status_code == 200 and r.json()["embedded"] == 0, r.text
    # "e" has three chunks, only the middle one tagged old: it must go whole or not at all.
    chunks = [Chunk("e", i, f"part {i}", {"tag": "old" if i == 1 else "new", "year": 2020}, content_hash="h",
                    chunk_count=3) for i in range(3)]
    await client.services.store.replace_documents("kb", chunks, [_vec(4 + i) for i in range(3)])  # type: ignore[attr-defined]


async def _doc_ids(client: httpx.AsyncClient) -> dict[str, int]:
    states = await client.services.store.doc_states("kb")  # type: ignore[attr-defined]
    return {doc_id: len(state.chunk_indices) for doc_id, state in states.items()}


async def _delete(client: httpx.AsyncClient, **body: object) -> httpx.Response:
    return await client.post("/v1/collections/kb/documents/delete", json=body)


async def test_dry_run_counts_then_delete_removes_exactly_the_matching_documents(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        await _seed(client)
        before = await _doc_ids(client)
        dry = await _delete(client, filter={"tag": "old"}, dry_run=True)
        after_dry = await _doc_ids(client)
        done = await _delete(client, filter={"tag": "old"})
        after = await _doc_ids(client)
        again = await _delete(client, filter={"tag": "old"})
    assert before == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 3}
    assert dry.status_code == 200, dry.text
    assert dry.json() == {"collection": "kb", "dry_run": True, "documents": 3, "chunks": 5,
                          "doc_ids": ["a", "b", "e"], "doc_ids_truncated": False}
    assert after_dry == before  # the dry run changed nothing
    assert done.json() == {**dry.json(), "dry_run": False}
    assert after == {"c": 1, "d": 1}  # "e" went whole, though only one of its chunks matched
    assert again.json()["documents"] == 0 and again.json()["doc_ids"] == []


async def test_range_and_id_filters(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        await _seed(client)
        ranged = await _delete(client, filter={"year": {"gte": 2019, "lt": 2022}})
        left = await _doc_ids(client)
        by_id = await _delete(client, filter={"doc_id": ["a", "zzz"]})
        final = await _doc_ids(client)
    assert ranged.json()["doc_ids"] == ["b", "c", "e"] and ranged.json()["chunks"] == 5
    assert left == {"a": 1, "d": 1}
    assert by_id.json()["doc_ids"] == ["a"] and final == {"d": 1}


async def test_empty_filter_is_refused_unless_all(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        await _seed(client)
        empty = await _delete(client, filter={})
        missing = await _delete(client)
        both = await _delete(client, filter={"tag": "old"}, all=True)
        invalid = await _delete(client, filter={"tag": {"near": 1}})
        unknown_key = await _delete(client, filter={"tag": "old"}, dryrun=True)
        untouched = await _doc_ids(client)
        everything_dry = await _delete(client, all=True, dry_run=True)
        everything = await _delete(client, all=True)
        nothing = await _doc_ids(client)
        no_collection = await client.post("/v1/collections/nope/documents/delete", json={"filter": {"tag": "x"}})
    for r in (empty, missing):
        assert r.status_code == 400
        assert r.json()["error"] == {"type": "invalid_request", "code": "empty_filter", "param": "filter",
                                     "message": "an empty filter would delete every document: send all: true to mean that"}
    assert both.status_code == 400 and both.json()["error"]["code"] == "filter_with_all"
    assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "invalid_filter"
    assert unknown_key.status_code == 422 and unknown_key.json()["error"]["param"] == "dryrun"
    assert untouched == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 3}
    assert everything_dry.json()["documents"] == 5 and everything_dry.json()["chunks"] == 7
    assert everything.json()["doc_ids"] == ["a", "b", "c", "d", "e"] and nothing == {}
    assert no_collection.status_code == 404 and no_collection.json()["error"]["code"] == "collection_not_found"
