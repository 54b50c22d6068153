"""The installed LlamaIndex retriever with the current llama-index-core: ``similarity_top_k`` reaches the server,
and the retriever works inside LlamaIndex's own engines with ``MockLLM`` (which answers with the prompt it was
given): ``RetrieverQueryEngine``, ``ContextChatEngine`` over two turns, and ``QueryFusionRetriever(use_async=True)``
called again and again, from this thread and from one without a loop (each call a fresh ``asyncio.run``). The
context retriever gives ``/v1/context``'s passages, in its order, with their citation fields."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from conftest import DOCS, QUERY, Service
from llama_index.core.async_utils import asyncio_run
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import NodeWithScore
from ragserve_client import Client
from ragserve_client.llamaindex import RagserveContextRetriever, RagserveRetriever

FOLLOW_UP = "and green tea?"


def _hits(service: Service, top_k: int, query: str = QUERY) -> list[tuple[str, float]]:
    with Client(service.url, service.api_key) as rs:
        return [(hit.id, hit.score) for hit in rs.search(service.collection, query, top_k=top_k).hits]


async def test_similarity_top_k_gives_the_services_hits(service: Service) -> None:
    retriever = RagserveRetriever(service.collection, base_url=service.url, api_key=service.api_key,
                                  similarity_top_k=2)
    nodes = retriever.retrieve(QUERY)
    anodes = await retriever.aretrieve(QUERY)
    await retriever.aclose()
    retriever.close()
    hits = _hits(service, 2)
    assert all(isinstance(node, NodeWithScore) for node in nodes)
    assert [(n.node.node_id, n.score) for n in nodes] == hits
    assert [(n.node.node_id, n.score) for n in anodes] == hits
    assert nodes[0].node.get_content() == DOCS[0].text


def test_query_engine_sees_the_retrieved_text(service: Service) -> None:
    retriever = RagserveRetriever(service.collection, base_url=service.url, api_key=service.api_key,
                                  similarity_top_k=2)
    answer = RetrieverQueryEngine.from_args(retriever, llm=MockLLM()).query(QUERY)
    retriever.close()
    assert [(n.node.node_id, n.score) for n in answer.source_nodes] == _hits(service, 2)
    assert DOCS[0].text in str(answer) and "ragserve_" not in str(answer)


def test_chat_engine_sees_the_retrieved_text_each_turn(service: Service) -> None:
    retriever = RagserveRetriever(service.collection, base_url=service.url, api_key=service.api_key,
                                  similarity_top_k=2)
    # an in-memory chat history: the default Memory of llama-index-core 0.14 keeps it in SQLite (aiosqlite),
    # whose connection is left to the garbage collector after its loop has closed
    chat = ContextChatEngine.from_defaults(retriever=retriever, llm=MockLLM(),
                                           memory=ChatMemoryBuffer.from_defaults(token_limit=3000))
    said = chat.chat(QUERY)
    again = chat.chat(FOLLOW_UP)  # each turn retrieves for its own message
    retriever.close()
    assert [(n.node.node_id, n.score) for n in said.source_nodes] == _hits(service, 2)
    assert [(n.node.node_id, n.score) for n in again.source_nodes] == _hits(service, 2, FOLLOW_UP)
    assert DOCS[0].text in str(said) and "ragserve_" not in str(said)


def test_async_fusion_called_repeatedly_gives_each_chunk_once(service: Service) -> None:
    dense = RagserveRetriever(service.collection, base_url=service.url, api_key=service.api_key,
                              similarity_top_k=3, mode="dense")
    hybrid = RagserveRetriever(service.collection, base_url=service.url, api_key=service.api_key,
                               similarity_top_k=3, mode="hybrid")
    fusion = QueryFusionRetriever([dense, hybrid], llm=MockLLM(), mode="reciprocal_rerank", similarity_top_k=3,
                                  num_queries=1, use_async=True)
    rounds = [fusion.retrieve(QUERY) for _ in range(5)]
    with ThreadPoolExecutor(1) as worker:  # no loop in that thread: LlamaIndex runs each fusion in asyncio.run
        rounds += list(worker.map(fusion.retrieve, [QUERY] * 5))
    for retriever in (dense, hybrid):  # this thread's loop, which LlamaIndex keeps open: closed on it
        asyncio_run(retriever.aclose())
        retriever.close()
    first = [n.node.node_id for n in rounds[0]]
    assert len(first) == len(set(first)) == 3 and set(first) == {hit_id for hit_id, _ in _hits(service, 3)}
    assert all([n.node.node_id for n in r] == first for r in rounds)


async def test_the_context_retriever_gives_the_services_passages(service: Service) -> None:
    retriever = RagserveContextRetriever(service.collection, base_url=service.url, api_key=service.api_key,
                                         budget_tokens=60)
    nodes = retriever.retrieve(QUERY)
    anodes = await retriever.aretrieve(QUERY)
    await retriever.aclose()
    retriever.close()
    with Client(service.url, service.api_key) as rs:
        expected = rs.context(service.collection, QUERY, budget_tokens=60)
    assert expected.passages and expected.tokens <= 60
    assert all(isinstance(node, NodeWithScore) for node in nodes)
    got = [(n.node.text, n.score, n.node.metadata["ragserve_number"], n.node.metadata["ragserve_doc_id"],
            n.node.metadata["ragserve_chunk_indexes"]) for n in nodes]
    assert got == [(p.text, p.score, p.number, p.doc_id, p.chunk_indexes) for p in expected.passages]
    assert [n.node.text for n in anodes] == [p.text for p in expected.passages]
