"""The LlamaIndex retriever against the live service: the nodes are exactly ragserve's hits, stable per chunk, with
ragserve's own fields namespaced and out of the LLM's and the embedder's view (the call's search id among them, which
feedback takes and the node's hash leaves out); the count reaches the server."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from llama_index.core.schema import MetadataMode, NodeWithScore

from service.client import AsyncClient, Client, Document, FeedbackResult
from service.client.llamaindex import RAGSERVE_KEYS, RagserveContextRetriever, RagserveRetriever
from service.config import Settings
from tests.service.client.seed import DOCS, seed
from tests.support.app import API_KEY
from tests.support.server import live_server

QUERY = "how is espresso made?"
SEARCH_ID = re.compile(r"s_[0-9a-f]{32}")


async def test_retriever_returns_the_hits_as_scored_nodes(minilm_settings: Settings) -> None:
    sent: list[dict[str, object]] = []

    def record(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs, \
            httpx.Client(base_url=url, event_hooks={"request": [record]}) as http:
        seed(rs)
        retriever = RagserveRetriever("kb", base_url=url, api_key=API_KEY, similarity_top_k=2)
        nodes = retriever.retrieve(QUERY)
        anodes = await retriever.aretrieve(QUERY)
        other = retriever.retrieve("coffee beans")  # another query, the same chunk among the hits
        hits = rs.search("kb", QUERY, top_k=2).hits
        await retriever.aclose()
        given = RagserveRetriever("kb", client=Client(api_key=API_KEY, http_client=http),
                                  async_client=AsyncClient(url, API_KEY), top_k=3, filter={"tag": "baking"},
                                  mode="sparse", rerank=False)
        filtered = given.retrieve("bread")
        await given.aclose()  # closes neither client it was given
        await given._async_client.aclose()
    assert sent == [{"collection": "kb", "query": "bread", "top_k": 3, "filter": {"tag": "baking"}, "mode": "sparse",
                     "rerank": {"enabled": False}}]
    assert [(n.node.node_id, n.score) for n in nodes] == [(h.id, h.score) for h in hits]
    assert [(n.node.node_id, n.score) for n in anodes] == [(h.id, h.score) for h in hits]
    top, node = hits[0], nodes[0].node
    assert isinstance(nodes[0], NodeWithScore)
    assert node.text == DOCS[0].text
    sid = node.metadata["ragserve_search_id"]
    assert node.metadata == {"tag": "coffee", "ragserve_collection": "kb", "ragserve_doc_id": "espresso",
                             "ragserve_chunk_index": 0, "ragserve_location": top.location, "ragserve_search_id": sid}
    assert SEARCH_ID.fullmatch(sid) and {n.node.metadata["ragserve_search_id"] for n in nodes} == {sid}
    assert node.excluded_llm_metadata_keys == node.excluded_embed_metadata_keys == RAGSERVE_KEYS
    assert node.get_content(MetadataMode.LLM) == node.get_content(MetadataMode.EMBED) == f"tag: coffee\n\n{node.text}"
    same = next(n.node for n in other if n.node.node_id == node.node_id)
    assert same.hash == node.hash  # per chunk, not per query: the call's search id is left out
    assert same.metadata == {**node.metadata, "ragserve_search_id": same.metadata["ragserve_search_id"]}
    assert same.metadata["ragserve_search_id"] != sid
    assert [n.node.metadata["ragserve_doc_id"] for n in filtered] == ["bread"]


def test_user_metadata_is_never_overwritten(minilm_settings: Settings) -> None:
    mine = {"score": 0.25, "collection": "my-shelf", "location": "Berlin", "ragserve_doc_id": "the user's"}
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        rs.create_collection("kb")
        rs.upsert_documents("kb", [Document("note", "A note about espresso.", mine)])
        retriever = RagserveRetriever("kb", base_url=url, api_key=API_KEY, similarity_top_k=1)
        (found,) = retriever.retrieve("espresso")
        retriever.close()
    assert found.node.metadata == {**mine, "ragserve_collection": "kb", "ragserve_chunk_index": 0,
                                   "ragserve_location": found.node.metadata["ragserve_location"],
                                   "ragserve_search_id": found.node.metadata["ragserve_search_id"]}


def test_the_count_has_one_name_at_a_time() -> None:
    with pytest.raises(ValueError) as disagree:
        RagserveRetriever("kb", similarity_top_k=2, top_k=3)
    with pytest.raises(ValueError) as zero:
        RagserveRetriever("kb", similarity_top_k=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'k'"):
        RagserveRetriever("kb", k=2)  # type: ignore[call-arg]
    assert str(disagree.value) == "similarity_top_k=2 and top_k=3 disagree: pass one"
    assert str(zero.value) == "similarity_top_k must be a positive integer, not 0"
    agreeing = RagserveRetriever("kb", similarity_top_k=2, top_k=2)
    assert (agreeing.similarity_top_k, RagserveRetriever("kb").similarity_top_k) == (2, 5)
    agreeing.close()


async def test_the_context_retriever_returns_the_passages_of_v1_context(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        retriever = RagserveContextRetriever("kb", base_url=url, api_key=API_KEY, budget_tokens=40)
        nodes = retriever.retrieve(QUERY)
        anodes = await retriever.aretrieve(QUERY)
        two = RagserveContextRetriever("kb", base_url=url, api_key=API_KEY, budget_tokens=500, similarity_top_k=2)
        limited = two.retrieve(QUERY)
        expected = rs.context("kb", QUERY, budget_tokens=40)
        await retriever.aclose()
        await two.aclose()
    assert expected.passages and expected.tokens <= 40
    got = [(n.node.text, n.score, n.node.metadata["ragserve_number"], n.node.metadata["ragserve_doc_id"],
            n.node.metadata["ragserve_chunk_indexes"]) for n in nodes]
    assert got == [(p.text, p.score, p.number, p.doc_id, p.chunk_indexes) for p in expected.passages]
    assert [n.node.text for n in anodes] == [p.text for p in expected.passages]
    assert len(limited) == 2
    node = nodes[0].node
    assert node.get_content(MetadataMode.LLM) == f"tag: {node.metadata['tag']}\n\n{node.text}"  # citation fields hidden


async def test_each_call_carries_its_search_id_and_feedback_takes_it(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        retriever = RagserveRetriever("kb", client=rs, async_client=AsyncClient(url, API_KEY), similarity_top_k=2)
        nodes, anodes = retriever.retrieve(QUERY), await retriever.aretrieve(QUERY)
        first = nodes[0].node
        rated = rs.feedback(first.metadata["ragserve_search_id"], chunk_id=first.node_id, rating=3)
        context = RagserveContextRetriever("kb", client=rs, async_client=AsyncClient(url, API_KEY), budget_tokens=200)
        passages = context.retrieve(QUERY)
        passage = passages[0].node
        on_passage = rs.feedback(passage.metadata["ragserve_search_id"], doc_id=passage.metadata["ragserve_doc_id"],
                                 rating=1)
        await retriever._async_client.aclose()
        await context._async_client.aclose()
    (sid,), (asid,) = ({n.node.metadata["ragserve_search_id"] for n in found} for found in (nodes, anodes))
    (context_sid,) = {n.node.metadata["ragserve_search_id"] for n in passages}
    assert SEARCH_ID.fullmatch(sid) and SEARCH_ID.fullmatch(asid) and SEARCH_ID.fullmatch(context_sid)
    assert len({sid, asid, context_sid}) == 3  # one id per call
    assert [n.node.hash for n in nodes] == [n.node.hash for n in anodes]  # the same chunks, the same hashes, call after call
    assert rated == FeedbackResult(search_id=sid, collection="kb", chunk_id=first.node_id, doc_id="espresso",
                                   rating=3, stored=False)
    assert (on_passage.search_id, on_passage.doc_id) == (context_sid, passage.metadata["ragserve_doc_id"])
    assert "ragserve_search_id" in passage.excluded_llm_metadata_keys
