"""``feedback`` against the live service, blocking and async: the search id a search or context hands out rates one
of its hits, the answer is the server's exactly (``stored`` only while the query log is on), and the server's
refusals arrive as the client's typed errors with their codes."""

from __future__ import annotations

import re

import httpx
import pytest

from service.client import AsyncClient, Client, FeedbackResult, InvalidRequest, NotFound
from service.config import Settings
from tests.service.client.seed import DOCS, seed
from tests.support.app import API_KEY
from tests.support.server import live_server

QUERY = "how is espresso made?"
SEARCH_ID = re.compile(r"s_[0-9a-f]{32}")
UNKNOWN = "s_" + "0" * 32


def test_a_search_id_rates_a_hit_by_chunk_or_document(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        found = rs.search("kb", QUERY, top_k=2)
        again = rs.search("kb", QUERY, top_k=2)
        first, second = found.hits
        (left_out,) = {d.id for d in DOCS} - {first.doc_id, second.doc_id}
        by_chunk = rs.feedback(found.search_id or "", chunk_id=first.id, rating=2, comment="the recipe")
        by_doc = rs.feedback(found.search_id or "", doc_id=second.doc_id, rating=0)
        context = rs.context("kb", QUERY, budget_tokens=200)
        on_passage = rs.feedback(context.search_id or "", doc_id=context.passages[0].doc_id, rating=3)
        with pytest.raises(NotFound) as unknown:
            rs.feedback(UNKNOWN, chunk_id=first.id, rating=1)
        with pytest.raises(InvalidRequest) as out_of_range:
            rs.feedback(found.search_id or "", chunk_id=first.id, rating=5)
        with pytest.raises(InvalidRequest) as both:
            rs.feedback(found.search_id or "", chunk_id=first.id, doc_id=first.doc_id, rating=1)
        with pytest.raises(InvalidRequest) as not_a_hit:
            rs.feedback(found.search_id or "", doc_id=left_out, rating=1)
    assert found.search_id is not None and SEARCH_ID.fullmatch(found.search_id)
    assert again.search_id != found.search_id  # one id per search, even for the same query
    assert by_chunk == FeedbackResult(search_id=found.search_id, collection="kb", chunk_id=first.id,
                                      doc_id="espresso", rating=2, stored=False)
    assert by_doc == FeedbackResult(search_id=found.search_id, collection="kb", chunk_id=second.id,
                                    doc_id=second.doc_id, rating=0, stored=False)
    assert context.search_id is not None and SEARCH_ID.fullmatch(context.search_id)
    assert (on_passage.search_id, on_passage.doc_id, on_passage.rating) == (
        context.search_id, context.passages[0].doc_id, 3)
    assert (unknown.value.status_code, unknown.value.code, unknown.value.param) == (
        404, "search_not_found", "search_id")
    assert (out_of_range.value.status_code, out_of_range.value.code, out_of_range.value.param) == (
        422, "rating_out_of_range", "rating")
    assert (both.value.status_code, both.value.code) == (422, "no_hit_named")  # the server's rule, not the client's
    assert (not_a_hit.value.status_code, not_a_hit.value.code, not_a_hit.value.param) == (
        422, "hit_not_in_search", "doc_id")


async def test_the_async_client_rates_and_the_log_keeps_it(minilm_settings: Settings) -> None:
    minilm_settings.query_log.enabled = True
    with live_server(minilm_settings) as url:
        with Client(url, API_KEY) as rs:
            seed(rs)
        async with AsyncClient(url, API_KEY) as ars:
            found = await ars.search("kb", QUERY, top_k=1)
            (top,) = found.hits
            rated = await ars.feedback(found.search_id or "", chunk_id=top.id, rating=-1, comment="wrong recipe")
            with pytest.raises(NotFound) as unknown:
                await ars.feedback(UNKNOWN, doc_id="espresso", rating=1)
            with pytest.raises(InvalidRequest) as out_of_range:
                await ars.feedback(found.search_id or "", chunk_id=top.id, rating=5)
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}) as http:
            log = (await http.get("/v1/querylog", timeout=60)).json()
    assert found.search_id is not None and SEARCH_ID.fullmatch(found.search_id)
    assert rated == FeedbackResult(search_id=found.search_id, collection="kb", chunk_id=top.id, doc_id="espresso",
                                   rating=-1, stored=True)
    (row,) = [r for r in log["rows"] if r["search_id"] == found.search_id]
    assert [(f["chunk_id"], f["doc_id"], f["rating"], f["comment"]) for f in row["feedback"]] == [
        (top.id, "espresso", -1, "wrong recipe")]
    assert (unknown.value.status_code, unknown.value.code) == (404, "search_not_found")
    assert (out_of_range.value.status_code, out_of_range.value.code) == (422, "rating_out_of_range")
