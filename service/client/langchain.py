"""A LangChain retriever over ragserve (the ``langchain`` extra: ``langchain-core`` only).

::

    from .langchain import RagserveRetriever

    retriever = RagserveRetriever(collection="kb", base_url="http://127.0.0.1:8000", api_key=KEY, top_k=5)
    docs = retriever.invoke("how do I rotate keys?")          # or: await retriever.ainvoke(...)
    docs = retriever.invoke("key rotation", k=2, filter={"tag": "security"}, mode="hybrid", rerank=False)
    retriever.close()                                          # or: await retriever.aclose()

``invoke`` and ``ainvoke`` take ``k`` (LangChain's name) or ``top_k``, ``filter``, ``mode`` and ``rerank`` for one
call, over the retriever's own settings; any other keyword, and any unknown constructor argument, is refused
with an error naming it. ``api_key`` is a ``SecretStr`` (never in a ``repr``).

Each hit becomes a ``Document`` whose ``id`` is the chunk's point id and whose metadata holds the hit's own
metadata plus ``doc_id``, ``chunk_index``, ``collection``, ``score``, ``vector_score``, ``rerank_score``,
``location`` and ``search_id``: the id of the search that returned it (the same in every document of one call, a new
one each call), with which the app rates the hit::

    client.feedback(doc.metadata["search_id"], chunk_id=doc.id, rating=3)   # -1 wrong, 0 not relevant, 1..3

The sync path uses one :class:`~service.client.Client`, the async one one
:class:`~service.client.AsyncClient` (no thread pool), each made on first use; the async client keeps a
connection pool per event loop, so repeated ``asyncio.run(retriever.ainvoke(q))`` is safe.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, model_validator

from .aio import AsyncClient
from .models import ContextResult, SearchResult
from .sync import Client

Mode = Literal["dense", "sparse", "hybrid"]
CALL_ARGS = ("k", "top_k", "filter", "mode", "rerank")
"""The keywords ``invoke``/``ainvoke`` take for one search."""
LANGCHAIN_ARGS = ("verbose",)
"""Keywords LangChain's own ``invoke`` reads and passes on as well: taken, and left to LangChain."""


def _one_count(k: Any, top_k: Any, default: Any) -> Any:
    """``k`` (LangChain's name) or ``top_k`` (ragserve's); both only when they agree."""
    if k is not None and top_k is not None and k != top_k:
        raise ValueError(f"k={k} and top_k={top_k} disagree: pass one")
    n = k if k is not None else top_k if top_k is not None else default
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"k must be a positive integer, not {n!r}")
    return n


class RagserveRetriever(BaseRetriever):
    # extra="forbid": an unknown argument is an error naming it; hide_input_in_errors: the input holds the key
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", hide_input_in_errors=True)

    collection: str
    base_url: str | None = None
    """Default ``$RAGSERVE_URL``, else http://127.0.0.1:8000."""
    api_key: SecretStr | None = None
    """Default ``$RAGSERVE_API_KEY``."""
    top_k: int = Field(default=5, ge=1)
    """How many documents a call returns; the constructor takes it as ``k`` too (LangChain's name)."""
    filter: dict[str, Any] | None = None
    mode: Mode | None = None
    rerank: bool | None = None
    """None: the server's default (on when it has a reranker)."""
    client: Client | None = None
    """Used as given (and not closed here); else one is made from base_url and api_key on first use."""
    async_client: AsyncClient | None = None
    _made_sync: Client | None = PrivateAttr(default=None)
    _made_async: AsyncClient | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @model_validator(mode="before")
    @classmethod
    def _k_is_top_k(cls, values: Any) -> Any:
        if isinstance(values, dict) and "k" in values:
            values = dict(values)
            values["top_k"] = _one_count(values.pop("k"), values.get("top_k"), None)
        return values

    def _key(self) -> str | None:
        return self.api_key.get_secret_value() if self.api_key is not None else None

    def _sync(self) -> Client:
        if self.client is not None:
            return self.client
        with self._lock:  # batch() calls from threads: still one client
            if self._made_sync is None:
                self._made_sync = Client(self.base_url, self._key())
            return self._made_sync

    def _async(self) -> AsyncClient:
        if self.async_client is not None:
            return self.async_client
        with self._lock:
            if self._made_async is None:
                self._made_async = AsyncClient(self.base_url, self._key())
            return self._made_async

    def close(self) -> None:
        """Close the sync client this retriever made (not one it was given)."""
        with self._lock:
            made, self._made_sync = self._made_sync, None
        if made is not None:
            made.close()

    async def aclose(self) -> None:
        """Close the clients this retriever made: the sync one, and the async one's connections of this loop
        (those of other loops close as their loops end)."""
        self.close()
        if self._made_async is not None:
            await self._made_async.aclose()

    def _search_args(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(kwargs) - set(CALL_ARGS) - set(LANGCHAIN_ARGS))
        if unknown:
            raise ValueError(f"RagserveRetriever does not take {', '.join(map(repr, unknown))}; "
                             f"a call takes {', '.join(CALL_ARGS)}")
        n = _one_count(kwargs.get("k"), kwargs.get("top_k"), self.top_k)
        return {"top_k": n, "filter": kwargs.get("filter", self.filter), "mode": kwargs.get("mode", self.mode),
                "rerank": kwargs.get("rerank", self.rerank)}

    def _documents(self, result: SearchResult) -> list[Document]:
        return [Document(id=h.id, page_content=h.text,
                         metadata={**h.as_metadata(result.collection), "search_id": result.search_id})
                for h in result.hits]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        args = self._search_args(kwargs)
        return self._documents(self._sync().search(self.collection, query, **args))

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **kwargs: Any) -> list[Document]:
        args = self._search_args(kwargs)
        return self._documents(await self._async().search(self.collection, query, **args))


CONTEXT_CALL_ARGS = ("k", "top_k", "budget_tokens", "filter", "mode", "rerank", "neighbours")
"""The keywords a context retriever's ``invoke``/``ainvoke`` take for one call."""


class RagserveContextRetriever(RagserveRetriever):
    """``POST /v1/context`` as a retriever: one ``Document`` per passage of a budgeted, de-duplicated context.

    ::

        retriever = RagserveContextRetriever(collection="kb", budget_tokens=1000, base_url=URL, api_key=KEY)
        docs = retriever.invoke("how do I rotate keys?")            # passages in context order
        docs = retriever.invoke("key rotation", k=2, neighbours=1)   # at most two passages

    ``k`` (or ``top_k``) is the most passages a call returns (default: as many as ``budget_tokens`` holds). A
    ``Document``'s text is the passage's text; its metadata holds the citation: ``number`` (its ``[n]``),
    ``collection``, ``doc_id``, ``chunk_indexes``, ``location`` (offsets, page, headings), ``tokens`` and the
    context's ``search_id``, with the document's own metadata; no per-query score is in the text. A passage has no
    single chunk id: rate it by its document, ``client.feedback(meta["search_id"], doc_id=meta["doc_id"], ...)``."""

    top_k: int | None = Field(default=None, ge=1)  # type: ignore[assignment]
    budget_tokens: int = Field(default=1000, ge=1)
    neighbours: int | None = Field(default=None, ge=0)

    def _search_args(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(kwargs) - set(CONTEXT_CALL_ARGS) - set(LANGCHAIN_ARGS))
        if unknown:
            raise ValueError(f"RagserveContextRetriever does not take {', '.join(map(repr, unknown))}; "
                             f"a call takes {', '.join(CONTEXT_CALL_ARGS)}")
        given = kwargs.get("k") is not None or kwargs.get("top_k") is not None or self.top_k is not None
        n = _one_count(kwargs.get("k"), kwargs.get("top_k"), self.top_k) if given else None
        return {"max_passages": n, "budget_tokens": kwargs.get("budget_tokens", self.budget_tokens),
                "filter": kwargs.get("filter", self.filter), "mode": kwargs.get("mode", self.mode),
                "rerank": kwargs.get("rerank", self.rerank), "neighbours": kwargs.get("neighbours", self.neighbours)}

    @staticmethod
    def _passages(result: ContextResult) -> list[Document]:
        return [Document(page_content=p.text, metadata={
            **p.metadata, "number": p.number, "collection": p.collection, "doc_id": p.doc_id,
            "chunk_indexes": p.chunk_indexes, "location": p.location, "tokens": p.tokens,
            "search_id": result.search_id})
            for p in result.passages]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        args = self._search_args(kwargs)
        return self._passages(self._sync().context(self.collection, query, **args))

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **kwargs: Any) -> list[Document]:
        args = self._search_args(kwargs)
        return self._passages(await self._async().context(self.collection, query, **args))
