"""Delete whole documents by a filter, or count what would go (a dry run).

The filter is matched against chunks, but documents go whole: every document any chunk of which matches
is deleted with all its chunks, so no document is left half there (which the indexer would take for an
interrupted write). The documents are found first, then counted and deleted by id, in batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.store.base import VectorStore
from service.store.types import Filter, MatchAny, both

BATCH = 1000
"""Document ids per delete or count call (one MatchAny condition each)."""


@dataclass(frozen=True)
class Deletion:
    doc_ids: list[str]
    """Sorted."""
    chunks: int


def _batches(ids: Sequence[str]) -> list[Sequence[str]]:
    return [ids[i:i + BATCH] for i in range(0, len(ids), BATCH)]


async def delete_matching(store: VectorStore, name: str, where: Filter | None, *, dry_run: bool,
                          scope: Filter | None = None) -> Deletion:
    """Documents matching ``where`` (None: every document) within ``scope`` (the chunks the caller's key may
    delete: ``service.store.tenancy.write_scope``), their chunk count, and unless ``dry_run`` their deletion."""
    doc_ids = sorted(await store.scroll_states(name, both(where, scope)))
    chunks = 0
    for batch in _batches(doc_ids):
        chunks += await store.count(name, both(Filter(must=(MatchAny("doc_id", tuple(batch)),)), scope))
    if not dry_run:
        for batch in _batches(doc_ids):
            await store.delete_documents(name, batch, scope=scope)
    return Deletion(doc_ids, chunks)
