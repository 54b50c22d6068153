"""A LlamaIndex retriever over ragserve (the ``llamaindex`` extra: ``llama-index-core`` only).

::

    from .llamaindex import RagserveRetriever

    retriever = RagserveRetriever("kb", base_url="http://127.0.0.1:8000", api_key=KEY, similarity_top_k=5)
    nodes = retriever.retrieve("how do I rotate keys?")       # or: await retriever.aretrieve(...)
    await retriever.aclose()                                   # or retriever.close(), without async use

Each hit becomes a ``NodeWithScore`` whose ``score`` is ragserve's score for the hit, and whose ``TextNode`` is
the chunk as stored: its id is the chunk's point id, its metadata the document's own metadata (untouched) plus
what ragserve adds, under ``ragserve_`` names (``ragserve_collection``, ``ragserve_doc_id``,
``ragserve_chunk_index``, ``ragserve_location``, ``ragserve_search_id``), which are kept out of the LLM's and the
embedder's view of the node. A user metadata key that happens to be one of ragserve's names keeps the user's value.

``ragserve_search_id`` is the id of the search that returned the node (the same for every node of one call, a new
one each call), with which the app rates the hit::

    client.feedback(n.node.metadata["ragserve_search_id"], chunk_id=n.node.node_id, rating=3)  # -1 wrong .. 3

It is the only per-call thing in the node (the dense and rerank sub-scores are ``Client.search``'s), and the node's
``hash`` leaves it out (:class:`RagserveNode`), so a chunk has one id and one ``hash`` whatever the query, and
fusion (``QueryFusionRetriever``), which merges repeats by ``hash``, still gives each chunk once.

``RagserveRetriever(...)`` plugs into ``RetrieverQueryEngine``, ``QueryFusionRetriever`` (``use_async=True``
too: the async client keeps a connection pool per event loop) and ``ContextChatEngine`` like any retriever.
"""

from __future__ import annotations

from typing import Any, Literal

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from .aio import AsyncClient
from .models import ContextPassage, ContextResult, SearchHit, SearchResult
from .sync import Client

PREFIX = "ragserve_"
SEARCH_ID = f"{PREFIX}search_id"
RAGSERVE_KEYS = [f"{PREFIX}collection", f"{PREFIX}doc_id", f"{PREFIX}chunk_index", f"{PREFIX}location", SEARCH_ID]


class RagserveNode(TextNode):
    """A ``TextNode`` whose ``hash`` leaves out ``ragserve_search_id``: the id is the call's, not the chunk's, and
    LlamaIndex tells nodes apart by ``hash`` (fusion merges repeats by it, docstores skip unchanged nodes by it)."""

    @property
    def hash(self) -> str:
        chunk = self.model_copy(update={"metadata": {k: v for k, v in self.metadata.items() if k != SEARCH_ID}})
        return TextNode.hash.fget(chunk)  # type: ignore[attr-defined,no-any-return]


def node(hit: SearchHit, collection: str, search_id: str | None = None) -> TextNode:
    """The chunk as a node: stable per chunk (id, text, hash), the user's metadata never overwritten."""
    values = (collection, hit.doc_id, hit.chunk_index, hit.location, search_id)
    metadata = {**dict(zip(RAGSERVE_KEYS, values, strict=True)), **hit.metadata}
    return RagserveNode(id_=hit.id, text=hit.text, metadata=metadata, excluded_llm_metadata_keys=list(RAGSERVE_KEYS),
                        excluded_embed_metadata_keys=list(RAGSERVE_KEYS))


class RagserveRetriever(BaseRetriever):
    """``similarity_top_k`` (LlamaIndex's name) or ``top_k``: how many nodes a query returns (default 5)."""

    def __init__(self, collection: str, *, base_url: str | None = None, api_key: str | None = None,
                 similarity_top_k: int | None = None, top_k: int | None = None,
                 filter: dict[str, Any] | None = None, mode: Literal["dense", "sparse", "hybrid"] | None = None,
                 rerank: bool | None = None, client: Client | None = None, async_client: AsyncClient | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False) -> None:
        if similarity_top_k is not None and top_k is not None and similarity_top_k != top_k:
            raise ValueError(f"similarity_top_k={similarity_top_k} and top_k={top_k} disagree: pass one")
        n = similarity_top_k if similarity_top_k is not None else top_k if top_k is not None else 5
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"similarity_top_k must be a positive integer, not {n!r}")
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.collection, self.filter, self.mode, self.rerank = collection, filter, mode, rerank
        self.similarity_top_k = n
        self._client = client or Client(base_url, api_key)
        self._async_client = async_client or AsyncClient(base_url, api_key)
        self._made = (client is None, async_client is None)

    def close(self) -> None:
        """Close the clients this retriever made (not those it was given)."""
        if self._made[0]:
            self._client.close()

    async def aclose(self) -> None:
        """Also close the async client's connections of this loop (those of other loops close with them)."""
        self.close()
        if self._made[1]:
            await self._async_client.aclose()

    def _args(self) -> dict[str, Any]:
        return {"top_k": self.similarity_top_k, "filter": self.filter, "mode": self.mode, "rerank": self.rerank}

    @staticmethod
    def _nodes(result: SearchResult) -> list[NodeWithScore]:
        return [NodeWithScore(node=node(h, result.collection, result.search_id), score=h.score) for h in result.hits]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(self._client.search(self.collection, query_bundle.query_str, **self._args()))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(await self._async_client.search(self.collection, query_bundle.query_str, **self._args()))


def passage_node(passage: ContextPassage, search_id: str | None = None) -> TextNode:
    """A context passage as a node: its text, the document's metadata, and the citation under ``ragserve_`` names
    (``ragserve_number``, ``ragserve_chunk_indexes`` besides the search retriever's), kept from the LLM's view. A
    passage has no single chunk id: rate it by ``ragserve_doc_id`` (``client.feedback(search_id, doc_id=...)``)."""
    ours = {f"{PREFIX}collection": passage.collection, f"{PREFIX}doc_id": passage.doc_id,
            f"{PREFIX}number": passage.number, f"{PREFIX}chunk_indexes": passage.chunk_indexes,
            f"{PREFIX}location": passage.location, SEARCH_ID: search_id}
    return RagserveNode(text=passage.text, metadata={**ours, **passage.metadata},
                        excluded_llm_metadata_keys=list(ours), excluded_embed_metadata_keys=list(ours))


class RagserveContextRetriever(RagserveRetriever):
    """``POST /v1/context`` as a retriever: a ``NodeWithScore`` per passage of a budgeted, de-duplicated context,
    in context order, scored by its best chunk. ``budget_tokens`` (default 1000); ``similarity_top_k`` (or
    ``top_k``) is the most passages (default: as many as the budget holds)."""

    def __init__(self, collection: str, *, budget_tokens: int = 1000, neighbours: int | None = None,
                 similarity_top_k: int | None = None, top_k: int | None = None, **kwargs: Any) -> None:
        limited = similarity_top_k is not None or top_k is not None
        super().__init__(collection, similarity_top_k=similarity_top_k, top_k=top_k, **kwargs)
        self.max_passages = self.similarity_top_k if limited else None
        self.budget_tokens, self.neighbours = budget_tokens, neighbours

    def _context_args(self) -> dict[str, Any]:
        return {"budget_tokens": self.budget_tokens, "max_passages": self.max_passages, "filter": self.filter,
                "mode": self.mode, "rerank": self.rerank, "neighbours": self.neighbours}

    @staticmethod
    def _passage_nodes(result: ContextResult) -> list[NodeWithScore]:
        return [NodeWithScore(node=passage_node(p, result.search_id), score=p.score) for p in result.passages]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._passage_nodes(self._client.context(self.collection, query_bundle.query_str,
                                                        **self._context_args()))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._passage_nodes(await self._async_client.context(self.collection, query_bundle.query_str,
                                                                    **self._context_args()))
