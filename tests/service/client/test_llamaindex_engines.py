"""The LlamaIndex retriever inside LlamaIndex's own engines, with ``MockLLM`` (which answers with the prompt it was
given, so the answer shows exactly what the LLM saw): ``RetrieverQueryEngine``, ``QueryFusionRetriever`` with
``use_async=True`` called again and again (from a thread without a loop, each call a fresh ``asyncio.run``: the
second used to fail with "Event loop is closed"), ``ContextChatEngine``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from llama_index.core.async_utils import asyncio_run
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever

from service.client import Client
from service.client.llamaindex import RagserveRetriever
from service.config import Settings
from tests.service.client.seed import DOCS, seed
from tests.support.app import API_KEY
from tests.support.descriptors import connections_to
from tests.support.server import live_server

QUERY = "how is espresso made?"


def test_query_and_chat_engines_see_text_and_user_metadata_only(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        hits = rs.search("kb", QUERY, top_k=2).hits
        retriever = RagserveRetriever("kb", base_url=url, api_key=API_KEY, similarity_top_k=2)
        answer = RetrieverQueryEngine.from_args(retriever, llm=MockLLM()).query(QUERY)
        chat = ContextChatEngine.from_defaults(retriever=retriever, llm=MockLLM())
        said = chat.chat(QUERY)
        again = chat.chat("and tea?")
        retriever.close()
    assert [(n.node.node_id, n.score) for n in answer.source_nodes] == [(h.id, h.score) for h in hits]
    assert [n.node.node_id for n in said.source_nodes] == [h.id for h in hits]
    assert len(again.source_nodes) == 2
    for text in (str(answer), str(said)):
        assert DOCS[0].text in text and "tag: coffee" in text
        assert "ragserve_" not in text and "score" not in text and hits[0].id not in text


def test_async_fusion_called_repeatedly_deduplicates_each_chunk(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url:
        with Client(url, API_KEY) as rs:  # closed before counting connections
            seed(rs)
            expected = {h.id for h in rs.search("kb", QUERY, top_k=3).hits}
        dense = RagserveRetriever("kb", base_url=url, api_key=API_KEY, similarity_top_k=3, mode="dense")
        hybrid = RagserveRetriever("kb", base_url=url, api_key=API_KEY, similarity_top_k=3, mode="hybrid")
        fusion = QueryFusionRetriever([dense, hybrid], llm=MockLLM(), mode="reciprocal_rerank", similarity_top_k=3,
                                      num_queries=1, use_async=True)
        rounds = [fusion.retrieve(QUERY) for _ in range(5)]
        with ThreadPoolExecutor(1) as worker:  # no loop in that thread: LlamaIndex runs each fusion in asyncio.run
            rounds += list(worker.map(fusion.retrieve, [QUERY] * 5))
        for retriever in (dense, hybrid):  # this thread's loop, which LlamaIndex keeps open: closed on it
            asyncio_run(retriever.aclose())
        left = connections_to(urlsplit(url).port or 0)
    first = [n.node.node_id for n in rounds[0]]
    assert len(first) == len(set(first)) == 3 and set(first) == expected  # each chunk once, from both retrievers
    assert all([n.node.node_id for n in r] == first for r in rounds)
    assert left == 0  # the worker's loops closed theirs as they ended; this thread's, on aclose
