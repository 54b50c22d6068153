"""The server backend caches collection settings for ``metadata_ttl_s``: its own changes show at once,
another replica's after the TTL, on a clock the test steps. Run on qdrant-client's local mode, the stand-in
for a Qdrant server."""

from __future__ import annotations

from qdrant_client import AsyncQdrantClient

from service.sparse.config import SparseConfig, SparseStats
from service.store.qdrant_server import ServerStore
from tests.support.lease_clock import ManualClock

TTL_S = 10.0


async def test_settings_cache_follows_own_changes_at_once_and_others_after_the_ttl() -> None:
    shared = AsyncQdrantClient(location=":memory:")  # one server, several API replicas
    clock = ManualClock()
    mine = ServerStore(shared, metadata_ttl_s=TTL_S, clock=clock)
    other = ServerStore(shared, metadata_ttl_s=TTL_S, clock=clock)
    try:
        await mine.create_collection("c", dimensions=4, model="m", sparse=SparseConfig())
        before = await other.describe("c")  # cached by the other replica from here
        assert before.sparse == SparseConfig()

        new = (SparseConfig(avg_len=42), SparseStats(documents=3, terms=126))
        await mine.set_sparse_settings("c", *new)
        own = await mine.describe("c")
        assert (own.sparse, own.sparse_stats) == new  # its own change: at once
        fresh = await ServerStore(shared, metadata_ttl_s=TTL_S, clock=clock).describe("c")
        assert (fresh.sparse, fresh.sparse_stats) == new  # the server has it, so what follows is the cache

        clock.advance(TTL_S - 0.5)
        cached = await other.describe("c")
        assert cached == before  # within the TTL: the settings it read before the change
        clock.advance(0.5)
        refreshed = await other.describe("c")
        assert (refreshed.sparse, refreshed.sparse_stats) == new  # the TTL is over: read again
        await mine.delete_collection("c")
    finally:
        await shared.close()
