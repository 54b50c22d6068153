"""The LangChain retriever against the live service: the documents are exactly ragserve's hits."""

from __future__ import annotations

from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda

from service.client import Client
from service.client.langchain import RagserveRetriever
from service.config import Settings
from tests.service.client.seed import DOCS, seed
from tests.support.app import API_KEY
from tests.support.server import live_server


async def test_retriever_returns_the_hits_as_documents(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        retriever = RagserveRetriever(collection="kb", base_url=url, api_key=API_KEY, top_k=2)
        docs = retriever.invoke("how is espresso made?")
        adocs = await retriever.ainvoke("how is espresso made?")
        hits = rs.search("kb", "how is espresso made?", top_k=2).hits
        filtered = RagserveRetriever(collection="kb", client=rs, filter={"tag": "tea"}, mode="sparse").invoke("tea")
        chain = retriever | RunnableLambda(lambda found: [d.metadata["doc_id"] for d in found])
        ids = chain.invoke("how is espresso made?")
        await retriever.aclose()
    assert docs == adocs
    assert [d.id for d in docs] == [h.id for h in hits] and len(docs) == 2
    top = hits[0]
    assert docs[0] == Document(id=top.id, page_content=DOCS[0].text, metadata={
        "tag": "coffee", "collection": "kb", "doc_id": "espresso", "chunk_index": 0, "score": top.score,
        "vector_score": top.vector_score, "rerank_score": None, "location": top.location})
    assert [d.metadata["doc_id"] for d in filtered] == ["tea"]
    assert ids == [h.doc_id for h in hits]
