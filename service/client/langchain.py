"""A LangChain retriever over ragserve (the ``langchain`` extra: ``langchain-core`` only).

::

    from service.client.langchain import RagserveRetriever

    retriever = RagserveRetriever(collection="kb", base_url="http://127.0.0.1:8000", api_key=KEY, top_k=5)
    docs = retriever.invoke("how do I rotate keys?")          # or: await retriever.ainvoke(...)
    retriever.close()                                          # or: await retriever.aclose()

Each hit becomes a ``Document`` whose ``id`` is the chunk's point id and whose metadata holds the hit's own
metadata plus ``doc_id``, ``chunk_index``, ``collection``, ``score``, ``vector_score``, ``rerank_score`` and
``location``. The sync path uses :class:`~service.client.Client`, the async one
:class:`~service.client.AsyncClient` (no thread pool).
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, PrivateAttr

from service.client.aio import AsyncClient
from service.client.models import SearchResult
from service.client.sync import Client


class RagserveRetriever(BaseRetriever):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    collection: str
    base_url: str | None = None
    """Default ``$RAGSERVE_URL``, else http://127.0.0.1:8000."""
    api_key: str | None = None
    """Default ``$RAGSERVE_API_KEY``."""
    top_k: int = 5
    filter: dict[str, Any] | None = None
    mode: Literal["dense", "sparse", "hybrid"] | None = None
    rerank: bool | None = None
    """None: the server's default (on when it has a reranker)."""
    client: Client | None = None
    """Used as given; else one is made from base_url and api_key on first use."""
    async_client: AsyncClient | None = None
    _made: dict[str, Any] = PrivateAttr(default_factory=dict)

    def _sync(self) -> Client:
        return self.client or self._made.setdefault("sync", Client(self.base_url, self.api_key))

    def _async(self) -> AsyncClient:
        return self.async_client or self._made.setdefault("async", AsyncClient(self.base_url, self.api_key))

    def close(self) -> None:
        """Close the clients this retriever made (not those it was given)."""
        if "sync" in self._made:
            self._made.pop("sync").close()

    async def aclose(self) -> None:
        self.close()
        if "async" in self._made:
            await self._made.pop("async").aclose()

    def _documents(self, result: SearchResult) -> list[Document]:
        return [Document(id=h.id, page_content=h.text, metadata=h.as_metadata(result.collection))
                for h in result.hits]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self._documents(self._sync().search(self.collection, query, top_k=self.top_k, filter=self.filter,
                                                   mode=self.mode, rerank=self.rerank))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        result = await self._async().search(self.collection, query, top_k=self.top_k, filter=self.filter,
                                            mode=self.mode, rerank=self.rerank)
        return self._documents(result)
