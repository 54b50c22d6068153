"""A LlamaIndex retriever over ragserve (the ``llamaindex`` extra: ``llama-index-core`` only).

::

    from service.client.llamaindex import RagserveRetriever

    retriever = RagserveRetriever("kb", base_url="http://127.0.0.1:8000", api_key=KEY, top_k=5)
    nodes = retriever.retrieve("how do I rotate keys?")       # or: await retriever.aretrieve(...)
    await retriever.aclose()                                   # or retriever.close(), without async use

Each hit becomes a ``NodeWithScore``: a ``TextNode`` (id: the chunk's point id; metadata: the hit's own plus
``doc_id``, ``chunk_index``, ``collection``, ``vector_score``, ``rerank_score``, ``location``) and the hit's
score. ``RagserveRetriever(...)`` also plugs into ``RetrieverQueryEngine`` like any retriever.
"""

from __future__ import annotations

from typing import Any, Literal

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from service.client.aio import AsyncClient
from service.client.models import SearchResult
from service.client.sync import Client


class RagserveRetriever(BaseRetriever):
    def __init__(self, collection: str, *, base_url: str | None = None, api_key: str | None = None,
                 top_k: int = 5, filter: dict[str, Any] | None = None,
                 mode: Literal["dense", "sparse", "hybrid"] | None = None, rerank: bool | None = None,
                 client: Client | None = None, async_client: AsyncClient | None = None,
                 callback_manager: CallbackManager | None = None) -> None:
        super().__init__(callback_manager=callback_manager)
        self.collection, self.top_k, self.filter, self.mode, self.rerank = collection, top_k, filter, mode, rerank
        self._client = client or Client(base_url, api_key)
        self._async_client = async_client or AsyncClient(base_url, api_key)
        self._made = (client is None, async_client is None)

    def close(self) -> None:
        """Close the clients this retriever made (not those it was given)."""
        if self._made[0]:
            self._client.close()

    async def aclose(self) -> None:
        self.close()
        if self._made[1]:
            await self._async_client.aclose()

    def _nodes(self, result: SearchResult) -> list[NodeWithScore]:
        out = []
        for h in result.hits:
            metadata = h.as_metadata(result.collection)
            metadata.pop("score")
            out.append(NodeWithScore(node=TextNode(id_=h.id, text=h.text, metadata=metadata), score=h.score))
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(self._client.search(self.collection, query_bundle.query_str, top_k=self.top_k,
                                               filter=self.filter, mode=self.mode, rerank=self.rerank))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(await self._async_client.search(self.collection, query_bundle.query_str, top_k=self.top_k,
                                                           filter=self.filter, mode=self.mode, rerank=self.rerank))
