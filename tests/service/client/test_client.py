"""The blocking client against the real service (uvicorn on loopback, the MiniLM runner, Qdrant Edge):
every operation, with its typed result, and the typed errors the real server's refusals become."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from service.client import (
    Client,
    Collection,
    Conflict,
    Document,
    InvalidRequest,
    Job,
    NotFound,
    PayloadTooLarge,
    SearchResult,
    Unauthorized,
)
from service.config import Settings
from tests.support.app import API_KEY
from tests.support.server import live_server

DOCS = [
    Document("espresso", "Espresso forces hot water through finely ground coffee.", {"tag": "coffee", "year": 2019}),
    Document("tea", "Green tea is steeped at about eighty degrees.", {"tag": "tea", "year": 2021}),
    Document("bread", "Sourdough bread rises with a wild yeast starter.", {"tag": "baking", "year": 2023}),
]


def test_collections_documents_and_search(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        created = rs.ensure_collection("kb", filter_fields={"tag": "keyword"})
        again = rs.ensure_collection("kb")
        with pytest.raises(Conflict) as exists:
            rs.create_collection("kb")
        upserted = rs.upsert_documents("kb", DOCS)
        listed = rs.list_collections()
        result = rs.search("kb", "how is espresso made?", top_k=2)
        filtered = rs.search("kb", "a drink", filter={"tag": ["tea", "baking"]}, mode="dense", top_k=3)
        raw = httpx.post(f"{url}/v1/search", headers={"Authorization": f"Bearer {API_KEY}"},
                         json={"collection": "kb", "query": "how is espresso made?", "top_k": 2}, timeout=120).json()
        rs.delete_document("kb", "bread")
        with pytest.raises(NotFound) as no_doc:
            rs.delete_document("kb", "bread")
        after = rs.get_collection("kb")
        rs.delete_collection("kb")
        with pytest.raises(NotFound) as gone:
            rs.get_collection("kb")
    assert created == Collection(name="kb", dimensions=384, points=0, model="sentence-transformers/all-MiniLM-L6-v2",
                                 filter_fields={"tag": "keyword"}, sparse=created.sparse)
    assert again.name == "kb" and again.filter_fields == {"tag": "keyword"}
    assert exists.value.status_code == 409 and exists.value.code == "collection_exists"
    assert (upserted.upserted, upserted.embedded) == (3, 3)
    assert [c.name for c in listed] == ["kb"] and listed[0].points == 3
    assert isinstance(result, SearchResult) and result.hits[0].doc_id == "espresso"
    assert [h.model_dump() for h in result.hits] == raw["hits"]  # typed, and exactly what the server said
    assert result.hits[0].metadata == {"tag": "coffee", "year": 2019} and result.mode == "hybrid"
    assert {h.doc_id for h in filtered.hits} == {"tea", "bread"} and filtered.mode == "dense"
    assert no_doc.value.code == "document_not_found" and no_doc.value.param == "doc_id"
    assert after.points == 2
    assert gone.value.status_code == 404 and gone.value.code == "collection_not_found"


def test_ingest_polls_the_job_and_reports_progress(minilm_settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# Coffee\nEspresso is strong.\n")
    (folder / "sub" / "b.txt").write_text("Tea is calm.")
    minilm_settings.indexer.poll_s = 0.05
    seen: list[Job] = []
    with live_server(minilm_settings, with_worker=True) as url, Client(url, API_KEY) as rs:
        rs.ensure_collection("kb")
        job = rs.ingest_path("kb", folder, progress=seen.append, poll_s=0.05)
        files = rs.ingest_files("kb", {"notes/c.md": b"# Bread\nSourdough.\n"}, options={"metadata": {"tag": "x"}},
                                wait=False)
        done = rs.wait_for_job(files.id, poll_s=0.05)
        jobs = rs.list_jobs()
        hit = rs.search("kb", "sourdough", top_k=1, filter={"tag": "x"}).hits[0]
    assert job.state == "succeeded" and job.counts.documents_indexed == 2 and job.counts.documents_seen == 2
    assert seen[-1] == job and all(j.id == job.id for j in seen)  # the callback saw every poll, the last is the result
    assert seen[-1].progress.fraction == 1.0
    assert files.state in ("queued", "running", "succeeded") and done.state == "succeeded"
    assert {j.id for j in jobs} == {job.id, files.id}
    assert (hit.doc_id, hit.metadata) == ("notes/c.md", {"title": "Bread", "tag": "x"})  # the heading, and ours


def test_refusals_are_typed(minilm_settings: Settings) -> None:
    minilm_settings.limits.max_documents_per_request = 2
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs, Client(url, "wrong-key-0123456789") as bad:
        rs.create_collection("kb")
        with pytest.raises(Unauthorized) as unauthorized:
            bad.list_collections()
        with pytest.raises(PayloadTooLarge) as too_many:
            rs.upsert_documents("kb", DOCS)
        with pytest.raises(InvalidRequest) as invalid:
            rs.search("kb", "x", top_k=0)
        with pytest.raises(InvalidRequest) as no_reranker:
            rs.search("kb", "x", rerank=True)
        with pytest.raises(InvalidRequest) as bad_filter:
            rs.search("kb", "x", filter={"tag": {"near": 1}})
        with pytest.raises(NotFound) as missing:
            rs.search("nope", "x")
        with pytest.raises(NotFound) as no_job:
            rs.get_job("0" * 32)
        with pytest.raises(InvalidRequest) as url_off:
            rs.search("kb", "x", image="https://example.com/a.png")
    assert (unauthorized.value.status_code, unauthorized.value.code) == (401, "invalid_api_key")
    assert (too_many.value.status_code, too_many.value.code) == (413, "too_many_documents")
    assert (invalid.value.status_code, invalid.value.code, invalid.value.param) == (422, "validation_error", "top_k")
    assert (no_reranker.value.status_code, no_reranker.value.code) == (400, "reranker_not_configured")
    assert (bad_filter.value.status_code, bad_filter.value.code) == (422, "invalid_filter")
    assert (missing.value.code, no_job.value.code) == ("collection_not_found", "job_not_found")
    assert (url_off.value.status_code, url_off.value.code) == (400, "generation_not_configured")
    assert "invalid_api_key" in str(unauthorized.value)


def test_embeddings_match_the_runner_route(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        out = rs.embed(["one text", "another text"])
        single = rs.embed("one text")
        raw = httpx.post(f"{url}/v1/embeddings", headers={"Authorization": f"Bearer {API_KEY}"},
                         json={"input": ["one text", "another text"]}, timeout=120).json()
    assert out.vectors == [d["embedding"] for d in raw["data"]]
    assert len(out.vectors) == 2 and len(out.vectors[0]) == 384
    assert single.vectors[0] == out.vectors[0]
    assert json.dumps(out.usage) == json.dumps(raw["usage"])


def test_rerank_is_the_runner_route_typed(qwen3_settings: Settings) -> None:
    passages = [d.text for d in DOCS]
    with live_server(qwen3_settings) as url, Client(url, API_KEY) as rs:
        ranked = rs.rerank("how is espresso made?", passages, top_n=2, instruction="Find the recipe")
        raw = httpx.post(f"{url}/v1/rerank", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120,
                         json={"query": "how is espresso made?", "documents": passages, "top_n": 2,
                               "instruction": "Find the recipe", "return_documents": True}).json()
    assert [(r.index, r.relevance_score, r.text) for r in ranked] == [
        (r["index"], r["relevance_score"], r["document"]["text"]) for r in raw["results"]]
    assert len(ranked) == 2 and ranked[0].relevance_score >= ranked[1].relevance_score
    assert ranked[0].text == passages[ranked[0].index]
