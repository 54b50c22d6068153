"""The LangChain retriever against the live service: the documents are exactly ragserve's hits, with the search id
each call got (feedback takes it), and each call's arguments are exactly what reached the server (the request as
httpx sent it, seen by its request hook)."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from pydantic import SecretStr, ValidationError

from service.client import AsyncClient, Client, FeedbackResult
from service.client.langchain import RagserveContextRetriever, RagserveRetriever
from service.config import Settings
from tests.service.client.seed import DOCS, seed
from tests.support.app import API_KEY
from tests.support.runners import free_port
from tests.support.server import live_server

QUERY = "how is espresso made?"
SEARCH_ID = re.compile(r"s_[0-9a-f]{32}")


def _per_chunk(docs: list[Document]) -> list[Document]:
    """The documents without the call's search id: what is the same whichever call returned them."""
    return [Document(id=d.id, page_content=d.page_content,
                     metadata={k: v for k, v in d.metadata.items() if k != "search_id"}) for d in docs]


async def test_retriever_returns_the_hits_as_documents(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        retriever = RagserveRetriever(collection="kb", base_url=url, api_key=API_KEY, top_k=2)
        docs = retriever.invoke(QUERY)
        adocs = await retriever.ainvoke(QUERY)
        hits = rs.search("kb", QUERY, top_k=2).hits
        filtered = RagserveRetriever(collection="kb", client=rs, filter={"tag": "tea"}, mode="sparse").invoke("tea")
        chain = retriever | RunnableLambda(lambda found: [d.metadata["doc_id"] for d in found])
        ids = chain.invoke(QUERY)
        await retriever.aclose()
    assert _per_chunk(docs) == _per_chunk(adocs)
    assert [d.id for d in docs] == [h.id for h in hits] and len(docs) == 2
    top = hits[0]
    assert _per_chunk(docs)[0] == Document(id=top.id, page_content=DOCS[0].text, metadata={
        "tag": "coffee", "collection": "kb", "doc_id": "espresso", "chunk_index": 0, "score": top.score,
        "vector_score": top.vector_score, "rerank_score": None, "location": top.location})
    assert [d.metadata["doc_id"] for d in filtered] == ["tea"]
    assert ids == [h.doc_id for h in hits]


async def test_each_call_carries_its_search_id_and_feedback_takes_it(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        retriever = RagserveRetriever(collection="kb", base_url=url, api_key=API_KEY, top_k=2)
        docs, adocs = retriever.invoke(QUERY), await retriever.ainvoke(QUERY)
        first = docs[0]
        rated = rs.feedback(first.metadata["search_id"], chunk_id=first.id, rating=3)
        context = RagserveContextRetriever(collection="kb", client=rs, budget_tokens=200)
        passages = context.invoke(QUERY)
        on_passage = rs.feedback(passages[0].metadata["search_id"], doc_id=passages[0].metadata["doc_id"], rating=1)
        await retriever.aclose()
    (sid,), (asid,) = {d.metadata["search_id"] for d in docs}, {d.metadata["search_id"] for d in adocs}
    (context_sid,) = {d.metadata["search_id"] for d in passages}
    assert SEARCH_ID.fullmatch(sid) and SEARCH_ID.fullmatch(asid) and SEARCH_ID.fullmatch(context_sid)
    assert len({sid, asid, context_sid}) == 3  # one id per call
    assert rated == FeedbackResult(search_id=sid, collection="kb", chunk_id=first.id, doc_id="espresso", rating=3,
                                   stored=False)
    assert (on_passage.search_id, on_passage.doc_id) == (context_sid, passages[0].metadata["doc_id"])


class Sent:
    """The search bodies httpx sent, in order (its request hooks, sync and async, on real connections)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, object]] = []

    def hook(self, request: httpx.Request) -> None:
        if request.url.path == "/v1/search":
            self.bodies.append(json.loads(request.content))

    async def ahook(self, request: httpx.Request) -> None:
        self.hook(request)


async def test_call_arguments_reach_the_server(minilm_settings: Settings) -> None:
    sent = Sent()
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs, \
            httpx.Client(base_url=url, event_hooks={"request": [sent.hook]}) as http:
        seed(rs)
        async with httpx.AsyncClient(base_url=url, event_hooks={"request": [sent.ahook]}) as ahttp:
            retriever = RagserveRetriever(collection="kb", client=Client(api_key=API_KEY, http_client=http),
                                          async_client=AsyncClient(api_key=API_KEY, http_client=ahttp),
                                          top_k=2, filter={"tag": ["coffee", "tea"]}, mode="dense")
            defaults = retriever.invoke(QUERY)
            one = retriever.invoke(QUERY, k=1)
            top_one = await retriever.ainvoke(QUERY, top_k=1)
            tea = retriever.invoke("green tea", k=3, filter={"tag": "tea"}, mode="sparse", rerank=False)
            both = await retriever.ainvoke("bread", k=3, top_k=3, filter={"tag": "baking"}, mode="hybrid")
    assert sent.bodies == [
        {"collection": "kb", "query": QUERY, "top_k": 2, "filter": {"tag": ["coffee", "tea"]}, "mode": "dense"},
        {"collection": "kb", "query": QUERY, "top_k": 1, "filter": {"tag": ["coffee", "tea"]}, "mode": "dense"},
        {"collection": "kb", "query": QUERY, "top_k": 1, "filter": {"tag": ["coffee", "tea"]}, "mode": "dense"},
        {"collection": "kb", "query": "green tea", "top_k": 3, "filter": {"tag": "tea"}, "mode": "sparse",
         "rerank": {"enabled": False}},
        {"collection": "kb", "query": "bread", "top_k": 3, "filter": {"tag": "baking"}, "mode": "hybrid"},
    ]
    assert [d.metadata["doc_id"] for d in defaults] == ["espresso", "tea"]
    assert [d.metadata["doc_id"] for d in one] == [d.metadata["doc_id"] for d in top_one] == ["espresso"]
    assert [d.metadata["doc_id"] for d in tea] == ["tea"]
    assert [d.metadata["doc_id"] for d in both] == ["bread"]


async def test_unknown_arguments_are_refused_by_name_before_any_request() -> None:
    retriever = RagserveRetriever(collection="kb", base_url=f"http://127.0.0.1:{free_port()}", api_key=API_KEY)
    with pytest.raises(ValueError) as unknown:
        retriever.invoke(QUERY, search_kwargs={"k": 1}, score_threshold=0.5)
    with pytest.raises(ValueError) as aunknown:
        await retriever.ainvoke(QUERY, fetch_k=9)
    with pytest.raises(ValueError) as disagree:
        retriever.invoke(QUERY, k=1, top_k=2)
    with pytest.raises(ValueError) as zero:
        retriever.invoke(QUERY, k=0)
    with pytest.raises(ValidationError) as constructor:
        RagserveRetriever(collection="kb", api_key=API_KEY, search_kwargs={"k": 1}, score_threshold=0.5)
    with pytest.raises(ValidationError) as both:
        RagserveRetriever(collection="kb", api_key=API_KEY, k=2, top_k=3)
    retriever.close()
    assert str(unknown.value) == ("RagserveRetriever does not take 'score_threshold', 'search_kwargs'; "
                                  "a call takes k, top_k, filter, mode, rerank")
    assert str(aunknown.value) == "RagserveRetriever does not take 'fetch_k'; a call takes k, top_k, filter, mode, rerank"
    assert str(disagree.value) == "k=1 and top_k=2 disagree: pass one"
    assert str(zero.value) == "k must be a positive integer, not 0"
    assert [(e["loc"], e["type"]) for e in constructor.value.errors()] == [
        (("search_kwargs",), "extra_forbidden"), (("score_threshold",), "extra_forbidden")]
    assert "k=2 and top_k=3 disagree: pass one" in str(both.value)
    assert API_KEY not in str(both.value) and API_KEY not in str(constructor.value)


def test_k_is_top_k_and_the_key_is_a_secret() -> None:
    retriever = RagserveRetriever(collection="kb", api_key=API_KEY, k=3)
    assert retriever.top_k == 3
    assert retriever.api_key == SecretStr(API_KEY)
    assert API_KEY not in repr(retriever) and API_KEY not in str(retriever)
    assert API_KEY not in retriever.model_dump_json()


def test_one_sync_client_per_retriever(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        retriever = RagserveRetriever(collection="kb", base_url=url, api_key=API_KEY, top_k=1)
        retriever.invoke(QUERY)
        made = retriever._made_sync
        found = retriever.batch([QUERY, "tea", "bread"])
        again = retriever._made_sync
        retriever.close()
    assert made is not None and again is made  # made on first use, then reused, threads included
    assert [[d.metadata["doc_id"] for d in docs] for docs in found] == [["espresso"], ["tea"], ["bread"]]
    assert retriever._made_sync is None
