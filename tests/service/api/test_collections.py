from __future__ import annotations

from service.config import Settings
from tests.support.app import app_client


async def test_collection_lifecycle(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        created = await client.post("/v1/collections", json={"name": "notes", "filter_fields": {"lang": "keyword"}})
        await client.post("/v1/collections/notes/documents", json={"documents": [
            {"id": "a", "text": "alpha", "metadata": {"lang": "en"}},
            {"id": "b", "text": "beta", "vector": [1.0] + [0.0] * 383},
        ]})
        listed = await client.get("/v1/collections")
        one = await client.get("/v1/collections/notes")
        deleted = await client.delete("/v1/collections/notes")
        gone = await client.get("/v1/collections/notes")
        again = await client.delete("/v1/collections/notes")
    assert created.status_code == 201
    assert created.json() == {"name": "notes", "dimensions": 384, "points": 0,
                              "model": "sentence-transformers/all-MiniLM-L6-v2", "filter_fields": {"lang": "keyword"},
                              "sparse": {"encoder": "qdrant", "language": "english", "lowercase": True,
                                         "stemming": True, "stopwords": True, "k1": 1.2, "b": 0.75, "avg_len": None},
                              "index": None}
    assert [c["name"] for c in listed.json()["collections"]] == ["notes"]
    assert one.json()["points"] == 2
    assert one.json()["index"] == {"indexed": 0, "unindexed": 2, "build": "idle", "phase": None, "reason": None,
                                   "last_ended": None, "last_built": None, "last_points": None,
                                   "last_seconds": None, "started": None, "progress": None, "eta_s": None,
                                   "waiting_writes": 0}
    assert one.json()["sparse"]["avg_len"] == 1.0  # estimated from the first documents: one term each
    assert deleted.status_code == 204
    assert gone.status_code == 404 and again.status_code == 404


async def test_collections_survive_a_restart(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        await client.post("/v1/collections", json={"name": "durable"})
        await client.post("/v1/collections/durable/documents", json={"documents": [{"id": "a", "text": "kept"}]})
    async with app_client(minilm_settings) as client:
        info = (await client.get("/v1/collections/durable")).json()
        hit = (await client.post("/v1/search", json={"collection": "durable", "query": "kept"})).json()["hits"][0]
    assert info["points"] == 1 and hit["doc_id"] == "a"


async def test_matryoshka_collection_embeds_at_its_own_size(qwen3_settings: Settings) -> None:
    async with app_client(qwen3_settings) as client:
        r = await client.post("/v1/collections", json={"name": "small", "dimensions": 256})
        up = await client.post("/v1/collections/small/documents", json={"documents": [
            {"id": "a", "text": "first text here"}, {"id": "b", "text": "something else entirely"}]})
        hit = await client.post("/v1/search", json={"collection": "small", "query": "something else entirely",
                                                     "rerank": {"enabled": False}})
    assert r.status_code == 201 and r.json()["dimensions"] == 256
    assert up.status_code == 200, up.text
    assert hit.status_code == 200 and hit.json()["hits"][0]["doc_id"] == "b"


async def test_openapi_documents_the_error_envelope(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        spec = (await client.get("/openapi.json")).json()
    search = spec["paths"]["/v1/search"]["post"]
    assert "ErrorResponse" in str(search["responses"]["422"]) and "429" in search["responses"]
