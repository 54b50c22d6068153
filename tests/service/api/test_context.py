"""POST /v1/context through the real stack: the MiniLM runner (vLLM), ingest jobs with the in-process worker,
the embedded Qdrant Edge store. Citations are held to the parsed documents' own text."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexer.documents import SourceFile
from indexer.parsers import parse
from service.config import Settings
from service.context.tokens import LocalCounter
from service.profiles import MINILM, default_checkpoint
from tests.support.app import app_client, wait_for_job
from tests.support.pdf import make_pdf

SENTENCES = [
    "Delta wings keep their lift at high angles of attack because leading edge vortices stay attached.",
    "The vortices burst when the angle grows past a limit, and the lift falls quickly.",
    "Slender bodies in supersonic flow carry a conical shock from the nose to the base.",
    "Boundary layer transition on a cone depends on the unit Reynolds number and the wall temperature.",
]
MARKDOWN = ("# Wings\n\n## Delta wings\n\n" + " ".join(SENTENCES[:2]) + "\n\n## Bodies\n\n"
            + " ".join(SENTENCES[2:]) + "\n").encode()
PDF_PAGES = [" ".join(SENTENCES[:2]) + " Page one ends here.", " ".join(SENTENCES[2:]) + " Page two ends here."]
FILES = {"wings.md": MARKDOWN, "report.pdf": make_pdf(PDF_PAGES)}
COUNTER = LocalCounter("all-MiniLM-L6-v2", Path(default_checkpoint(MINILM.embedding)))


async def _indexed(client: httpx.AsyncClient, root: Path) -> dict[str, str]:
    """Index the files in 16-token chunks overlapping by 6; each document's parsed text, by doc id."""
    for name, data in FILES.items():
        (root / name).write_bytes(data)
    r = await client.post("/v1/collections", json={"name": "kb"})
    assert r.status_code == 201, r.text
    r = await client.post("/v1/collections/kb/ingest", json={
        "source": {"kind": "path", "path": str(root)}, "chunking": "tokens", "chunk_tokens": 16,
        "chunk_overlap": 6})
    assert r.status_code == 202, r.text
    job = await wait_for_job(client, r.json()["id"])
    assert job["state"] == "succeeded", job
    return {name: parse(SourceFile(name, data))[0].full_text for name, data in FILES.items()}


async def test_passages_are_their_sources_text_and_the_budget_holds(minilm_settings: Settings, tmp_path: Path) -> None:
    root = tmp_path / "files"
    root.mkdir()
    minilm_settings.ingest.allowed_roots = [tmp_path]
    async with app_client(minilm_settings, with_worker=True) as client:
        texts = await _indexed(client, root)
        calls: list[Any] = []
        store = client.services.store  # type: ignore[attr-defined]
        read = store.read_chunks

        async def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(args)
            return await read(*args, **kwargs)

        store.read_chunks = counted
        for neighbours in (0, 2):
            calls.clear()
            r = await client.post("/v1/context", json={
                "collection": "kb", "query": "What happens to the lift of delta wings at high angles of attack?",
                "budget_tokens": 120, "neighbours": neighbours, "mode": "dense"})
            assert r.status_code == 200, r.text
            body = r.json()
            assert len(calls) == (1 if neighbours else 0)  # the neighbour read is one store call
            assert body["tokenizer"] == client.services.embedder.model.name  # type: ignore[attr-defined]
            assert body["tokens"] == await COUNTER.count(body["context"]) <= 120
            assert body["passages"], body
            for p in body["passages"]:
                loc = p["location"]
                source = texts[p["doc_id"]]
                assert p["text"] == source[loc["char_start"]:loc["char_end"]]
                assert p["text"].encode() == source.encode()[loc["byte_start"]:loc["byte_end"]]
                assert p["chunk_indexes"] == sorted(p["chunk_indexes"])
                title = p["metadata"].get("title") or p["doc_id"]
                assert f"[{p['number']}] {title}\n{p['text']}" in body["context"]
                if p["doc_id"] == "report.pdf":
                    assert loc["page"] in (1, 2)
                else:
                    assert loc["headings"][0] == "Wings"
            if neighbours:  # overlapping chunks merged: a passage spans several, its text the source's once
                assert any(len(p["chunk_indexes"]) > 1 for p in body["passages"])
            assert [p["number"] for p in body["passages"]] == list(range(1, len(body["passages"]) + 1))
            assert set(body["timings_ms"]) >= {"retrieve", "merge_rrf", "pack", "total"}


async def test_a_follow_up_retrieves_for_the_conversation(minilm_settings: Settings, tmp_path: Path) -> None:
    root = tmp_path / "files"
    root.mkdir()
    minilm_settings.ingest.allowed_roots = [tmp_path]
    async with app_client(minilm_settings, with_worker=True) as client:
        await _indexed(client, root)
        messages = [{"role": "user", "content": "How does a slender body behave in supersonic flow?"},
                    {"role": "assistant", "content": "It carries a conical shock [1]."},
                    {"role": "user", "content": [{"type": "text", "text": "and what about its transition?"}]}]
        r = await client.post("/v1/context", json={"collections": ["kb"], "messages": messages,
                                                   "budget_tokens": 200})
        assert r.status_code == 200, r.text
        assert r.json()["query_used"] == ("How does a slender body behave in supersonic flow?\n"
                                          "and what about its transition?")


BAD = [
    ({"query": "x", "budget_tokens": 2}, "budget_too_small"),
    ({"query": "x", "budget_tokens": 10**6}, "budget_too_large"),
    ({"query": "x", "messages": [{"role": "user", "content": "y"}], "budget_tokens": 100}, "query_or_messages"),
    ({"budget_tokens": 100}, "query_or_messages"),
    ({"messages": [{"role": "assistant", "content": "y"}], "budget_tokens": 100}, "no_user_turn"),
    ({"query": "x", "budget_tokens": 100, "tokenizer": "gpt-5"}, "unknown_tokenizer"),
    ({"query": "x", "budget_tokens": 100, "order": "random"}, "validation_error"),
    ({"query": "x", "budget_tokens": 100, "template": "{number} {author} {text}"}, "unknown_template_field"),
    ({"query": "x", "budget_tokens": 100, "neighbours": 99}, "neighbours_too_large"),
    ({"query": "x", "budget_tokens": 100, "candidates": 10**5}, "top_k_too_large"),
]


async def test_bad_input_is_a_422_and_changes_nothing(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        r = await client.post("/v1/collections", json={"name": "kb"})
        assert r.status_code == 201
        r = await client.post("/v1/collections/kb/documents", json={"documents": [{"id": "a", "text": "Owls."}]})
        assert r.status_code == 200
        answers = await asyncio.gather(*(client.post("/v1/context", json={"collection": "kb", **body})
                                         for body, _ in BAD))
        for (body, code), r in zip(BAD, answers, strict=True):
            assert (r.status_code, r.json()["error"]["code"]) == (422, code), (body, r.text)
        r = await client.get("/v1/collections/kb")
        assert r.json()["points"] == 1


@pytest.mark.parametrize("path", ["/v1/context"])
async def test_the_route_needs_a_key(minilm_settings: Settings, path: str) -> None:
    async with app_client(minilm_settings, api_key=None) as client:
        r = await client.post(path, json={"collection": "kb", "query": "x", "budget_tokens": 100})
        assert r.status_code == 401
