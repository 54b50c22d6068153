"""The server backend caches collection settings for ``metadata_ttl_s``: its own changes show at once,
another replica's after the TTL. Run on qdrant-client's local mode, the stand-in for a Qdrant server."""

from __future__ import annotations

import asyncio

from qdrant_client import AsyncQdrantClient

from service.sparse.config import SparseConfig, SparseStats
from service.store.server import ServerStore


async def test_settings_cache_follows_own_changes_at_once_and_others_after_the_ttl() -> None:
    shared = AsyncQdrantClient(location=":memory:")  # one server, two API replicas
    mine, other = ServerStore(shared, metadata_ttl_s=0.5), ServerStore(shared, metadata_ttl_s=0.5)
    await mine.create_collection("c", dimensions=4, model="m", sparse=SparseConfig())
    assert (await other.describe("c")).sparse == SparseConfig()

    calls = 0
    original = other._call

    async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return await original(*args, **kwargs)

    other._call = counted  # type: ignore[method-assign]
    await mine.set_sparse_settings("c", SparseConfig(avg_len=42), SparseStats(documents=3, terms=126))
    assert (await mine.describe("c")).sparse == SparseConfig(avg_len=42)  # its own change: at once
    assert (await other.describe("c")).sparse == SparseConfig() and calls == 0  # the other replica: cached
    await asyncio.sleep(0.6)
    refreshed = await other.describe("c")
    assert (refreshed.sparse, refreshed.sparse_stats, calls) == (SparseConfig(avg_len=42),
                                                                  SparseStats(documents=3, terms=126), 1)
    await mine.delete_collection("c")
    await shared.close()
