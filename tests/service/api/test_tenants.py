"""Two tenants in one collection, through the API on the real stack (minilm runner, Qdrant Edge): neither
ever sees the other's chunks, in any search mode, and whatever a tenant's request body says, its writes carry
its own tenant value."""

from __future__ import annotations

import json

import httpx
import pytest

from service.auth.keys import sha256_hex
from service.config import Settings
from service.config.keys import ApiKeyEntry
from tests.support.app import app_client, wait_for_job

KEYS = {"a": "tenant-a-key-0123456789abcdef", "b": "tenant-b-key-0123456789abcdef"}
# The same ids and similar words in both tenants, so any leak would rank high.
TEXTS = {
    "a": {"readme": "Alpha corp rotates its vault keys every month", "faq": "Alpha corp support answers tickets"},
    "b": {"readme": "Beta corp rotates its vault keys every week", "faq": "Beta corp support answers emails"},
}


def _settings(settings: Settings) -> Settings:
    settings.api_key_hashes = [
        ApiKeyEntry(id=f"tenant-{t}", sha256=sha256_hex(k), scopes=["read", "write"],
                    tenant={"field": "org", "value": t})
        for t, k in KEYS.items()
    ]
    return settings


def _as(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


async def _seed(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/collections", json={"name": "shared", "filter_fields": {"lang": "keyword"}})
    assert r.status_code == 201, r.text
    for tenant, other in (("a", "b"), ("b", "a")):
        docs = [{"id": i, "text": t, "metadata": {"org": other, "lang": "en"}}  # claims the other tenant
                for i, t in TEXTS[tenant].items()]
        r = await client.post("/v1/collections/shared/documents", json={"documents": docs}, headers=_as(tenant))
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
async def test_two_tenants_never_see_each_others_chunks(minilm_settings: Settings, mode: str) -> None:
    async with app_client(_settings(minilm_settings)) as client:
        await _seed(client)
        for tenant in ("a", "b"):
            for query in (TEXTS["a"]["readme"], TEXTS["b"]["readme"], "corp vault keys support"):
                r = await client.post("/v1/search", headers=_as(tenant),
                                      json={"collection": "shared", "query": query, "mode": mode, "top_k": 10})
                assert r.status_code == 200, r.text
                hits = r.json()["hits"]
                assert hits, (tenant, query)
                assert {h["text"] for h in hits} <= set(TEXTS[tenant].values()), (tenant, query)
                assert {h["metadata"]["org"] for h in hits} == {tenant}
            # a filter naming the other tenant finds nothing rather than the other tenant's chunks
            r = await client.post("/v1/search", headers=_as(tenant), json={
                "collection": "shared", "query": "corp vault keys", "mode": mode, "filter": {"org": "a" if tenant == "b" else "b"}})
            assert r.status_code == 200 and r.json()["hits"] == []
        r = await client.post("/v1/search", json={"collection": "shared", "query": "corp vault keys", "mode": mode,
                                                  "top_k": 10})
        assert {h["metadata"]["org"] for h in r.json()["hits"]} == {"a", "b"}  # the untenanted key sees both


async def test_writes_are_stamped_and_deletes_reach_only_the_own_tenant(minilm_settings: Settings) -> None:
    async with app_client(_settings(minilm_settings)) as client:
        await _seed(client)
        r = await client.post("/v1/search", json={"collection": "shared", "query": "vault keys", "top_k": 10})
        stamped = sorted((h["doc_id"], h["metadata"]["org"], h["text"]) for h in r.json()["hits"])
        assert stamped == sorted((i, t, text) for t, docs in TEXTS.items() for i, text in docs.items())
        info = await client.get("/v1/collections/shared", headers=_as("a"))
        assert info.json()["points"] == 2  # a tenant counts its own chunks

        r = await client.delete("/v1/collections/shared/documents/readme", headers=_as("a"))
        assert r.status_code == 204
        r = await client.delete("/v1/collections/shared/documents/readme", headers=_as("a"))
        assert r.status_code == 404 and r.json()["error"]["code"] == "document_not_found"
        r = await client.delete("/v1/collections/shared/documents/readme")  # untenanted: not a tenant's document
        assert r.status_code == 404
        r = await client.post("/v1/search", json={"collection": "shared", "query": "vault keys", "top_k": 10})
        assert sorted((h["doc_id"], h["metadata"]["org"]) for h in r.json()["hits"]) == [
            ("faq", "a"), ("faq", "b"), ("readme", "b")]


async def test_a_tenants_ingest_job_is_stamped_and_its_own(minilm_settings: Settings) -> None:
    records = "\n".join(json.dumps({"_id": f"r{i}", "text": f"record {i} about vault keys",
                                    "metadata": {"org": "b"}}) for i in range(3))
    async with app_client(_settings(minilm_settings), with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "shared"})).status_code == 201
        r = await client.post("/v1/collections/shared/ingest", headers=_as("a"),
                              files={"files": ("records.jsonl", records.encode())},
                              data={"options": json.dumps({"metadata": {"org": "b"}})})
        assert r.status_code == 202, r.text
        job = await wait_for_job(client, r.json()["id"])
        assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == 3, job
        r = await client.post("/v1/search", json={"collection": "shared", "query": "vault keys", "top_k": 10})
        assert sorted((h["doc_id"], h["metadata"]["org"]) for h in r.json()["hits"]) == [
            ("r0", "a"), ("r1", "a"), ("r2", "a")]
        r = await client.post("/v1/search", headers=_as("b"), json={"collection": "shared", "query": "vault keys"})
        assert r.json()["hits"] == []
        # the job is the submitter's: tenant b's key does not see it, the admin key does
        assert (await client.get(f"/v1/jobs/{job['id']}", headers=_as("b"))).status_code == 404
        assert [j["id"] for j in (await client.get("/v1/jobs", headers=_as("b"))).json()["jobs"]] == []
        assert [j["id"] for j in (await client.get("/v1/jobs", headers=_as("a"))).json()["jobs"]] == [job["id"]]
        assert [j["id"] for j in (await client.get("/v1/jobs")).json()["jobs"]] == [job["id"]]
