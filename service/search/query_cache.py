"""The query-embedding cache: a search's query vector, kept in this API process for the next identical search.

An entry is keyed by its **partition** (who may share it), the embedding model, the instruction, the dimensions
and the exact query text, and holds the vector as the runner sent it (float32 bytes). A hit returns exactly the
vector that filled the entry: the runner's float32 values, as the fill's search used them.

Partitions (:func:`partition_of`): a key with a tenant or a collection allowlist has one of its own, so neither a
``cached`` flag nor a faster answer ever tells it what another key asked; unscoped keys (``RAGSERVE_API_KEYS``,
entries without tenant nor allowlist, which see every collection anyway) share one.

Bounded by bytes: each entry costs its vector's bytes, its key's UTF-8 text and :data:`ENTRY_OVERHEAD_BYTES`; the
least recently used entries are evicted first. Only a finished embedding fills an entry (a failed or cancelled one
never does). Two identical searches that miss at the same time both embed (no single-flight: one caller's deadline,
cancellation or failure never reaches another); the first to finish fills the entry and the other leaves it as it
is, so every hit on it returns the same vector.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from service.auth.principal import Principal

SHARED_PARTITION = ""
"""The partition of unscoped keys (no tenant, no collection allowlist). A scoped key's is ``key:<id>``; key ids are
unique and never empty, so no two keys' partitions meet."""

ENTRY_OVERHEAD_BYTES = 256
"""What an entry costs besides its vector's bytes and its key's text: the key object, the strings' and the bytes
object's headers, the ordered dict's slot (about 200 bytes, measured with tracemalloc on CPython 3.11), rounded up."""


def partition_of(principal: Principal) -> str:
    """The cache partition of the key ``principal`` authenticated with."""
    if principal.tenant is None and principal.collections is None:
        return SHARED_PARTITION
    return f"key:{principal.id}"


@dataclass(frozen=True, slots=True)
class QueryKey:
    partition: str
    model: str
    instruction: str | None
    """The request's embedding instruction; None: the deployment's (one per process, so one per key)."""
    dimensions: int
    text: str

    @property
    def text_bytes(self) -> int:
        """UTF-8 bytes of the key's strings."""
        return sum(len(s.encode()) for s in (self.partition, self.model, self.instruction or "", self.text))


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    evictions: int
    entries: int
    bytes: int
    max_bytes: int


def entry_bytes(key: QueryKey, dimensions: int) -> int:
    """What an entry of ``key`` with a ``dimensions``-long vector counts against ``max_bytes``."""
    return dimensions * 4 + key.text_bytes + ENTRY_OVERHEAD_BYTES


class QueryEmbeddingCache:
    """LRU by bytes. Not thread-safe: the API's event loop is its only user."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[QueryKey, bytes] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = self._evictions = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def get(self, key: QueryKey) -> list[float] | None:
        """The vector that filled ``key`` (now the most recently used), or None; counted as a hit or a miss."""
        blob = self._entries.get(key)
        if blob is None:
            self._misses += 1
            return None
        self._entries.move_to_end(key)
        self._hits += 1
        return np.frombuffer(blob, dtype="<f4").tolist()  # a fresh list: a caller's changes never reach the entry

    def put(self, key: QueryKey, vector: list[float]) -> bool:
        """Fill ``key`` with ``vector`` unless it is filled already (a concurrent miss finished first) or too big
        for the cache, evicting the least recently used entries to make room. False when nothing was stored,
        also for a vector float32 cannot carry exactly (never one the embedding client decoded)."""
        if not self.enabled or key in self._entries:
            return False
        size = entry_bytes(key, len(vector))
        if size > self.max_bytes:
            return False
        packed = np.asarray(vector, dtype="<f4")
        if packed.tolist() != vector:
            return False
        while self._bytes + size > self.max_bytes:
            old_key, old = self._entries.popitem(last=False)
            self._bytes -= entry_bytes(old_key, len(old) // 4)
            self._evictions += 1
        self._entries[key] = packed.tobytes()
        self._bytes += size
        return True

    def keys(self) -> list[QueryKey]:
        """The keys held, least recently used first."""
        return list(self._entries)

    def stats(self) -> CacheStats:
        return CacheStats(self._hits, self._misses, self._evictions, len(self._entries), self._bytes, self.max_bytes)
