"""``RAGSERVE_QUERY_CACHE__*``: the query-embedding cache."""

from __future__ import annotations

from pydantic import BaseModel, Field


class QueryCacheSettings(BaseModel):
    """The query-embedding cache of each API process (service/search/query_cache.py): a repeated search skips the
    embedding runner. Entries are kept apart per scoped API key (docs/query-cache.md)."""

    max_bytes: int = Field(
        64 << 20, ge=0, description="Bytes of query vectors (plus each entry's key) kept per API process, least "
        "recently used evicted first; 64 MiB holds about 15,000 1024-dimensional queries. 0 turns the cache off.",
    )
