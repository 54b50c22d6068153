"""Prometheus metrics of the query-embedding cache (:mod:`service.search.query_cache`), read from it when scraped:

- ``ragserve_query_cache_hits_total``: searches whose query vector came from the cache;
- ``ragserve_query_cache_misses_total``: searches that looked and embedded the query (one runner request each);
- ``ragserve_query_cache_evictions_total``: entries evicted to make room (least recently used first);
- ``ragserve_query_cache_entries``, ``ragserve_query_cache_bytes``: what it holds now, in entries and in bytes
  counted against ``ragserve_query_cache_max_bytes`` (``RAGSERVE_QUERY_CACHE__MAX_BYTES``; 0: off).

The counts are this process's: with several API processes, each has its own cache and its own series.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.search.query_cache import QueryEmbeddingCache


class QueryCacheCollector(Collector):
    def __init__(self) -> None:
        self._cache: QueryEmbeddingCache | None = None

    def watch(self, cache: QueryEmbeddingCache) -> None:
        """Report this cache from now on (one lifespan's)."""
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        if self._cache is None:
            return
        s = self._cache.stats()
        yield CounterMetricFamily("ragserve_query_cache_hits", "Searches whose query vector came from the cache",
                                  value=s.hits)
        yield CounterMetricFamily("ragserve_query_cache_misses", "Searches that looked in the cache and embedded "
                                  "the query", value=s.misses)
        yield CounterMetricFamily("ragserve_query_cache_evictions", "Entries evicted to make room", value=s.evictions)
        yield GaugeMetricFamily("ragserve_query_cache_entries", "Query vectors held", value=s.entries)
        yield GaugeMetricFamily("ragserve_query_cache_bytes", "Bytes held, as counted against the bound",
                                value=s.bytes)
        yield GaugeMetricFamily("ragserve_query_cache_max_bytes", "The bound (0: the cache is off)",
                                value=s.max_bytes)
