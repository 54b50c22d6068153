"""The client's generation paths against the live qwen3 stack with the tiny Qwen3-VL runner: chat whole and
streamed (sync and async) with citations and the grounding search's id (feedback rates a citation with it), and
image search from a data URL, bytes and a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.client import AsyncClient, Client, ImageInfo, InvalidRequest, data_url
from service.config import Settings
from tests.service.client.seed import seed
from tests.support.app import API_KEY
from tests.support.images import raster
from tests.support.server import live_server

PHOTO = raster("PNG", 320, 200, color=(30, 120, 200))
QUESTION = "How is espresso made?"
GROUNDED = {"collections": ["kb"], "context_top_k": 2, "max_tokens": 24, "temperature": 0.0, "rerank": False}
"""Reranking is the server's business (tests/service/api/test_generation.py); here the vector order is enough."""


async def test_chat_whole_and_streamed_with_citations(vl_settings: Settings) -> None:
    with live_server(vl_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        whole = rs.chat(QUESTION, **GROUNDED)  # type: ignore[arg-type]
        with rs.chat_stream(QUESTION, **GROUNDED) as stream:  # type: ignore[arg-type]
            deltas = list(stream)
        async with AsyncClient(url, API_KEY) as ars:
            async with ars.chat_stream(QUESTION, **GROUNDED) as astream:  # type: ignore[arg-type]
                adeltas = [d async for d in astream]
        rated = rs.feedback(whole.search_id or "", chunk_id=whole.citations[0].id, rating=2)
        plain = rs.chat([{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0.0)
        with pytest.raises(InvalidRequest) as too_long:
            rs.chat(QUESTION, max_tokens=10_000)
    assert whole.content and len(deltas) > 1
    assert "".join(deltas) == whole.content == "".join(adeltas) == stream.text  # greedy: the same answer
    a, b = stream.result(), astream.result()
    assert (a.content, a.citations, a.finish_reason, a.model) == (b.content, b.citations, b.finish_reason, b.model)
    assert [c.number for c in whole.citations] == [1, 2] and stream.citations == whole.citations
    assert {c.doc_id for c in whole.citations} <= {"espresso", "tea", "bread"}
    assert all(c.collection == "kb" and c.text for c in whole.citations)
    assert whole.retrieval is not None and whole.retrieval.query == QUESTION and whole.retrieval.reranked is False
    assert stream.retrieval == whole.retrieval.model_copy(update={"timings_ms": stream.retrieval.timings_ms})  # type: ignore[union-attr]
    assert stream.finish_reason == whole.finish_reason == "length"
    assert plain.citations == [] and plain.retrieval is None and plain.content
    ids = [whole.search_id, stream.search_id, astream.search_id]
    assert all(i is not None and re.fullmatch(r"s_[0-9a-f]{32}", i) for i in ids) and len(set(ids)) == 3
    assert stream.result().search_id == stream.search_id and plain.search_id is None
    assert (rated.search_id, rated.chunk_id, rated.doc_id, rated.rating) == (
        whole.search_id, whole.citations[0].id, whole.citations[0].doc_id, 2)
    assert (too_long.value.status_code, too_long.value.code) == (422, "max_tokens_too_large")


def test_image_search_from_a_data_url_bytes_and_a_file(vl_settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "photo.png"
    path.write_bytes(PHOTO)
    with live_server(vl_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        by_url = rs.search("kb", image=data_url(PHOTO), top_k=2, rerank=False)
        by_bytes = rs.search("kb", image=PHOTO, top_k=2, rerank=False)
        by_path = rs.search("kb", image=path, top_k=2, rerank=False)
        with_text = rs.search("kb", "what is it?", image=path, top_k=2, rerank=False)
        asked = rs.chat("What is this?", image=path, collections=["kb"], max_tokens=8, temperature=0.0, rerank=False)
        with pytest.raises(InvalidRequest) as remote:
            rs.search("kb", image="https://example.com/photo.png")
        with pytest.raises(ValueError, match="pass a pathlib.Path"):
            rs.search("kb", image="photo.png")
    generated = by_url.generated_query
    assert generated and by_bytes.generated_query == generated == by_path.generated_query  # same pixels, same query
    assert by_url.image == ImageInfo(format="PNG", width=320, height=200, source_width=320, source_height=200)
    assert [h.id for h in by_url.hits] == [h.id for h in by_bytes.hits] == [h.id for h in by_path.hits]
    assert by_url.query == generated and with_text.query.startswith("what is it?\n")
    assert asked.retrieval is not None and asked.retrieval.generated_query
    assert (remote.value.status_code, remote.value.code) == (400, "url_not_allowed")
