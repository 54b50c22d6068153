"""The step every write ends with, the documents API's and the indexing worker's alike: the chunks' BM25 vectors,
with the collection's own length normalisation, then the chunks replace every chunk their documents had (the
indexer may have split a document into more chunks than it has now)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from service.documents.normalisation import SparseNormaliser
from service.store.base import VectorStore
from service.store.types import Chunk, Filter


async def replace_chunks(store: VectorStore, sparse: SparseNormaliser, collection: str, chunks: Sequence[Chunk],
                         vectors: Sequence[Sequence[float]], *, scope: Filter | None,
                         check: Callable[[], None] = lambda: None) -> None:
    """``check`` runs right before each store call with no ``await`` between (the worker's lease: the normaliser
    may store the collection's BM25 statistics, and a worker that lost its lease must write neither)."""
    check()
    bm25 = await sparse.vectors(collection, [c.text for c in chunks])
    check()
    await store.replace_documents(collection, chunks, vectors, bm25, scope=scope)
