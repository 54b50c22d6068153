"""The LlamaIndex retriever against the live service: the nodes are exactly ragserve's hits."""

from __future__ import annotations

from llama_index.core.schema import NodeWithScore, TextNode

from service.client import AsyncClient, Client
from service.client.llamaindex import RagserveRetriever
from service.config import Settings
from tests.service.client.seed import DOCS, seed
from tests.support.app import API_KEY
from tests.support.server import live_server


async def test_retriever_returns_the_hits_as_scored_nodes(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        retriever = RagserveRetriever("kb", base_url=url, api_key=API_KEY, top_k=2)
        nodes = retriever.retrieve("how is espresso made?")
        anodes = await retriever.aretrieve("how is espresso made?")
        hits = rs.search("kb", "how is espresso made?", top_k=2).hits
        await retriever.aclose()
        given = RagserveRetriever("kb", client=rs, async_client=AsyncClient(url, API_KEY), filter={"tag": "baking"},
                                  mode="sparse")
        filtered = given.retrieve("bread")
        await given.aclose()  # closes neither client it was given
        await given._async_client.aclose()
    assert [(n.node.node_id, n.score) for n in nodes] == [(h.id, h.score) for h in hits]
    assert [(n.node.node_id, n.score) for n in anodes] == [(h.id, h.score) for h in hits]
    top = hits[0]
    expected = TextNode(id_=top.id, text=DOCS[0].text, metadata={
        "tag": "coffee", "collection": "kb", "doc_id": "espresso", "chunk_index": 0,
        "vector_score": top.vector_score, "rerank_score": None, "location": top.location})
    assert nodes[0].node.text == expected.text and nodes[0].node.metadata == expected.metadata
    assert isinstance(nodes[0], NodeWithScore)
    assert [n.node.metadata["doc_id"] for n in filtered] == ["bread"]
