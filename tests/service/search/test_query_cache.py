"""The query-embedding cache on its own: exact LRU eviction by bytes, hits returning the filling vector, the first
fill kept, and the partition of each kind of key."""

from __future__ import annotations

import numpy as np

from service.auth.principal import Principal
from service.search.query_cache import (
    ENTRY_OVERHEAD_BYTES,
    SHARED_PARTITION,
    QueryEmbeddingCache,
    QueryKey,
    entry_bytes,
    partition_of,
)
from service.store.tenancy import Tenant

DIMS = 4


def key(text: str, *, partition: str = SHARED_PARTITION, instruction: str | None = None,
        dimensions: int = DIMS) -> QueryKey:
    return QueryKey(partition, "m", instruction, dimensions, text)


def vec(seed: int, dims: int = DIMS) -> list[float]:
    """float32 values, as the embedding client decodes them."""
    return np.random.default_rng(seed).standard_normal(dims).astype("<f4").tolist()


def test_an_entry_costs_its_vector_its_keys_text_and_the_overhead() -> None:
    k = QueryKey("key:app", "model", "find", 4, "héllo")
    assert entry_bytes(k, 4) == 16 + len("key:app") + len("model") + len("find") + len("héllo".encode()) \
        + ENTRY_OVERHEAD_BYTES


def test_a_hit_returns_exactly_the_vector_that_filled_it() -> None:
    cache = QueryEmbeddingCache(1 << 20)
    filled = vec(1)
    assert cache.put(key("q"), filled)
    got = cache.get(key("q"))
    assert got == filled
    got[0] = 99.0  # the caller's copy: the entry is unchanged
    assert cache.get(key("q")) == filled
    assert (cache.stats().hits, cache.stats().misses) == (2, 0)


def test_the_first_fill_is_kept() -> None:
    """Two identical concurrent misses both embed; the one that finishes second leaves the entry as it is."""
    cache = QueryEmbeddingCache(1 << 20)
    assert cache.put(key("q"), vec(1))
    assert not cache.put(key("q"), vec(2))
    assert cache.get(key("q")) == vec(1)


def test_every_part_of_the_key_tells_entries_apart() -> None:
    cache = QueryEmbeddingCache(1 << 20)
    cache.put(key("q"), vec(1))
    others = [key("q", partition="key:tenant-a"), key("q", instruction="find"), key("q", dimensions=8),
              key("q "), QueryKey(SHARED_PARTITION, "other-model", None, DIMS, "q")]
    assert [cache.get(k) for k in others] == [None] * len(others)
    assert cache.get(key("q")) == vec(1)
    assert (cache.stats().hits, cache.stats().misses) == (1, len(others))


def test_least_recently_used_entries_are_evicted_first_exactly_to_the_byte_bound() -> None:
    size = entry_bytes(key("a"), DIMS)  # "a" .. "d": one character each, so every entry has this size
    cache = QueryEmbeddingCache(3 * size)
    for i, text in enumerate("abc"):
        assert cache.put(key(text), vec(i))
    assert cache.stats().bytes == 3 * size
    assert cache.get(key("a")) == vec(0)  # a is now the most recently used: b is the oldest
    assert cache.put(key("d"), vec(3))
    assert [k.text for k in cache.keys()] == ["c", "a", "d"]
    assert cache.get(key("b")) is None

    big = key("e" * (2 * size - entry_bytes(key(""), DIMS)))  # exactly two small entries' worth
    assert entry_bytes(big, DIMS) == 2 * size
    assert cache.put(big, vec(4))
    assert [k.text[:1] for k in cache.keys()] == ["d", "e"]  # c and a went, oldest first
    s = cache.stats()
    assert (s.entries, s.bytes, s.evictions) == (2, 3 * size, 3)


def test_an_entry_larger_than_the_bound_is_not_stored_and_evicts_nothing() -> None:
    size = entry_bytes(key("a"), DIMS)
    cache = QueryEmbeddingCache(size)
    assert cache.put(key("a"), vec(0))
    assert not cache.put(key("ab"), vec(1))
    assert cache.keys() == [key("a")]
    assert cache.stats().evictions == 0


def test_a_bound_of_zero_stores_nothing() -> None:
    cache = QueryEmbeddingCache(0)
    assert not cache.enabled
    assert not cache.put(key("a"), vec(0))
    assert cache.stats().entries == 0


def test_a_vector_float32_cannot_carry_exactly_is_not_stored() -> None:
    cache = QueryEmbeddingCache(1 << 20)
    assert not cache.put(key("a"), [0.1, 0.2, 0.3, 0.4])  # float64 values: a hit would not return them
    assert cache.keys() == []


def test_scoped_keys_have_partitions_of_their_own_and_unscoped_keys_share_one() -> None:
    read = frozenset({"read"})
    unscoped = [Principal("env-1", frozenset({"read", "write", "admin"})), Principal("reader", read)]
    scoped = [Principal("tenant-a", read, tenant=Tenant("org", "a")),
              Principal("tenant-a-2", read, tenant=Tenant("org", "a")),
              Principal("kb-only", read, collections=frozenset({"kb"})),
              Principal("kb-only-2", read, collections=frozenset({"kb"}))]
    assert {partition_of(p) for p in unscoped} == {SHARED_PARTITION}
    partitions = [partition_of(p) for p in scoped]
    assert partitions == ["key:tenant-a", "key:tenant-a-2", "key:kb-only", "key:kb-only-2"]
    assert SHARED_PARTITION not in partitions
