"""The query-embedding cache through the API, with the scripted runner at the network edge (every embedding
request that reaches it is counted, and it answers each with the vector the test chose for it):

- a hit hands the store exactly the vector that filled the entry, and the runner saw one request;
- keys with a tenant or a collection allowlist never share entries with other keys; unscoped keys share;
- failed and cancelled embeddings fill nothing; two identical concurrent misses both embed, the first fill stays;
- ``timings_ms`` (``embed_cache`` for a hit, ``embed`` for a miss) and the ``/metrics`` counters say what happened; ``max_bytes`` 0 turns it off;
- grounded chat uses the asking key's partition.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.auth.keys import sha256_hex
from service.config import Settings
from service.config.keys import ApiKeyEntry
from tests.support.app import app_client
from tests.support.scripted_embed import (
    LIVENESS_S,
    MINILM_DIMS,
    Arrival,
    ScriptedEmbedder,
    scripted_settings,
    vector,
)
from tests.support.scripted_runner import ScriptedRunner
from tests.support.scripted_runner import scripted_settings as chat_settings

QUERY = "how often are the vault keys rotated?"
KEYS = {"tenant-a": "tenant-a-key-0123456789abcdef", "tenant-b": "tenant-b-key-0123456789abcdef",
        "kb-only": "kb-only-key-0123456789abcdef", "reader": "reader-key-0123456789abcdef"}


def _settings(tmp_path: Path, **sections: object) -> Settings:
    settings = scripted_settings(tmp_path, qdrant={"edge_process": False}, **sections)
    settings.api_key_hashes = [
        ApiKeyEntry(id="tenant-a", sha256=sha256_hex(KEYS["tenant-a"]), scopes=["read"],
                    tenant={"field": "org", "value": "a"}),
        ApiKeyEntry(id="tenant-b", sha256=sha256_hex(KEYS["tenant-b"]), scopes=["read"],
                    tenant={"field": "org", "value": "b"}),
        ApiKeyEntry(id="kb-only", sha256=sha256_hex(KEYS["kb-only"]), scopes=["read"], collections=["kb"]),
        ApiKeyEntry(id="reader", sha256=sha256_hex(KEYS["reader"]), scopes=["read"]),  # unscoped
    ]
    return settings


def _answer(v: np.ndarray) -> httpx.Response:
    """vLLM's answer to a one-input request, base64 float32 (as ragserve asks)."""
    return httpx.Response(200, json={
        "id": "embd", "object": "list", "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1},
        "data": [{"object": "embedding", "index": 0, "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode()}],
    })


def _nth_vector(arrival_vectors: list[np.ndarray], runner: ScriptedEmbedder) -> Callable[[Arrival], httpx.Response]:
    """A script answering the runner's n-th request with ``arrival_vectors[n]`` (the last one from then on)."""

    def script(arrival: Arrival) -> httpx.Response:
        n = runner.arrivals.index(arrival)
        return _answer(arrival_vectors[min(n, len(arrival_vectors) - 1)])

    return script


def _spy_dense(store: Any) -> list[list[float] | None]:
    """The dense vector of every store query, in order: what each search handed the store."""
    seen: list[list[float] | None] = []
    original = store.query

    async def query(collection: str, **kwargs: Any) -> Any:
        seen.append(kwargs["dense"])
        return await original(collection, **kwargs)

    store.query = query
    return seen


async def _search(client: httpx.AsyncClient, key: str | None = None, **body: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {KEYS[key]}"} if key else {}
    r = await client.post("/v1/search", headers=headers,
                          json={"collection": "kb", "query": QUERY, "mode": "dense", **body})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _cached(answer: dict[str, Any]) -> bool:
    """Whether the query's vector came from the cache: its stage is ``embed_cache`` then, ``embed`` otherwise,
    never both; every timing a number."""
    timings = answer["timings_ms"]
    assert all(type(ms) is float for ms in timings.values()), timings
    stages = {"embed", "embed_cache"} & set(timings)
    assert len(stages) == 1, timings
    return stages == {"embed_cache"}


async def _metrics(client: httpx.AsyncClient) -> list[str]:
    r = await client.get("/metrics")
    assert r.status_code == 200, r.text
    return [line for line in r.text.splitlines() if line.startswith("ragserve_query_cache_")]


def _app(tmp_path: Path, runner: ScriptedEmbedder, **sections: object) -> Any:
    return app_client(_settings(tmp_path, **sections), transports={"embedding": runner.transport})


async def test_a_hit_hands_the_store_exactly_the_vector_that_filled_it(tmp_path: Path) -> None:
    first, later = vector("the first answer"), vector("every later answer")
    runner = ScriptedEmbedder()
    runner.script = _nth_vector([first, later], runner)
    async with _app(tmp_path, runner) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        dense = _spy_dense(client.services.store)  # type: ignore[attr-defined]
        filled = await _search(client)
        hit = await _search(client)

        assert runner.inputs() == [(QUERY,)]
        assert dense == [first.tolist(), first.tolist()]
        assert (_cached(filled), _cached(hit)) == (False, True)
        assert set(hit["timings_ms"]) == {"embed_cache", "search", "total"}
        size = MINILM_DIMS * 4 + len(QUERY) + len("sentence-transformers/all-MiniLM-L6-v2") + 256
        assert await _metrics(client) == [
            "ragserve_query_cache_hits_total 1.0", "ragserve_query_cache_misses_total 1.0",
            "ragserve_query_cache_evictions_total 0.0", "ragserve_query_cache_entries 1.0",
            f"ragserve_query_cache_bytes {size:.1f}", "ragserve_query_cache_max_bytes 6.7108864e+07",  # 64 MiB
        ]


async def test_tenants_never_share_entries(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    async with _app(tmp_path, runner) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        a = await _search(client, "tenant-a")
        b = await _search(client, "tenant-b")  # the same query: a miss, and the runner sees it again
        a_again = await _search(client, "tenant-a")

        assert [_cached(r) for r in (a, b, a_again)] == [False, False, True]
        assert runner.inputs() == [(QUERY,), (QUERY,)]


async def test_a_collection_allowlist_partitions_and_unscoped_keys_share(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    async with _app(tmp_path, runner) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        outcomes = [_cached(await _search(client, key))
                    for key in (None, "reader", "kb-only", "tenant-a", "kb-only", None)]

        # The plain key fills the shared partition and the unscoped hashed key hits it; the allowlisted key and
        # the tenant each miss (their own partitions), then the allowlisted key hits its own entry.
        assert outcomes == [False, True, False, False, True, True]
        assert len(runner.arrivals) == 3


async def test_instruction_and_query_text_are_part_of_the_key(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    async with _app(tmp_path, runner) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        outcomes = [_cached(await _search(client, **body))
                    for body in ({}, {"instruction": "Find the policy"}, {"query": QUERY.upper()}, {},
                                 {"instruction": "Find the policy"}, {"instruction": ""})]
        assert outcomes == [False, False, False, True, True, True]  # "": the deployment's instruction, as none
        assert len(runner.arrivals) == 3


async def test_a_failed_embedding_fills_nothing(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    good = _nth_vector([vector(QUERY)], runner)
    runner.script = lambda a: (httpx.Response(200, json={"object": "list", "data": [{"index": 0}]})
                               if runner.arrivals.index(a) == 0 else good(a))
    async with _app(tmp_path, runner) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        failed = await client.post("/v1/search", json={"collection": "kb", "query": QUERY, "mode": "dense"})
        assert failed.status_code == 502, failed.text
        assert client.services.search.query_cache.keys() == []  # type: ignore[attr-defined]
        outcomes = [_cached(await _search(client)) for _ in range(2)]

        assert outcomes == [False, True]
        assert len(runner.arrivals) == 2


async def test_a_cancelled_search_fills_nothing(tmp_path: Path) -> None:
    runner = ScriptedEmbedder(hold=lambda a: len(runner.arrivals) == 1)  # the first request waits at the runner
    async with _app(tmp_path, runner) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        task = asyncio.create_task(_search(client))
        (held,) = await runner.reached(1)
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        # The runner's request is shared by the queries of one turn: it is cancelled once its last caller is,
        # a turn or two after that caller's task ended.
        await asyncio.wait_for(held.settled.wait(), LIVENESS_S)
        assert held.outcome == "cancelled"
        assert client.services.search.query_cache.keys() == []  # type: ignore[attr-defined]

        outcomes = [_cached(await _search(client)) for _ in range(2)]
        assert outcomes == [False, True]
        assert len(runner.arrivals) == 2


async def test_two_identical_concurrent_misses_both_embed_and_the_first_fill_stays(tmp_path: Path) -> None:
    first, second = vector("answer one"), vector("answer two")
    runner = ScriptedEmbedder(hold=lambda a: True)
    runner.script = _nth_vector([first, second], runner)
    async with _app(tmp_path, runner) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        dense = _spy_dense(client.services.store)  # type: ignore[attr-defined]
        # The second search starts once the first one's request is at the runner (queries of one loop turn would
        # share one request).
        searches = {asyncio.create_task(_search(client))}
        await runner.reached(1)
        searches.add(asyncio.create_task(_search(client)))
        arrivals = await runner.reached(2)  # no single-flight: both misses reached the runner
        arrivals[0].release.set()  # the first request is answered (with `first`); the second is still held
        done, held = await asyncio.wait(searches, return_when=asyncio.FIRST_COMPLETED)
        runner.release_all()  # the second is answered (with `second`) and finds the entry filled already
        answers = [t.result() for t in done] + [await t for t in held]
        hit = await _search(client)

        assert [_cached(a) for a in answers] == [False, False]
        assert _cached(hit) is True
        assert len(runner.arrivals) == 2
        assert sorted(dense[:2]) == sorted([first.tolist(), second.tolist()])
        assert dense[2] == first.tolist()


async def test_max_bytes_zero_turns_the_cache_off(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    async with _app(tmp_path, runner, query_cache={"max_bytes": 0}) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        outcomes = [_cached(await _search(client)) for _ in range(2)]

        assert outcomes == [False, False]
        assert len(runner.arrivals) == 2
        assert await _metrics(client) == [
            "ragserve_query_cache_hits_total 0.0", "ragserve_query_cache_misses_total 0.0",
            "ragserve_query_cache_evictions_total 0.0", "ragserve_query_cache_entries 0.0",
            "ragserve_query_cache_bytes 0.0", "ragserve_query_cache_max_bytes 0.0",
        ]


async def test_a_sparse_search_embeds_nothing_and_says_nothing_of_the_cache(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    async with _app(tmp_path, runner) as client:
        r = await client.post("/v1/collections", json={"name": "kb", "sparse": {}})
        assert r.status_code == 201, r.text
        body = await _search(client, mode="sparse", query="vault keys")
        assert not {"embed", "embed_cache"} & set(body["timings_ms"])
        assert runner.arrivals == []


async def test_grounded_chat_fills_and_hits_in_the_asking_keys_partition(tmp_path: Path) -> None:
    """Chat grounding embeds the question through the cache as the asking key: the same key's search then hits,
    another tenant's misses."""
    runner = ScriptedRunner(dimensions=MINILM_DIMS)  # every role: embedding, generator
    settings = chat_settings(tmp_path)
    settings.qdrant.edge_process = False
    settings.api_key_hashes = _settings(tmp_path).api_key_hashes
    async with app_client(settings, transports=runner.transports) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        r = await client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {KEYS['tenant-a']}"}, json={
            "messages": [{"role": "user", "content": QUERY}], "ragserve": {"collections": ["kb"]}})
        assert r.status_code == 200, r.text
        outcomes = [_cached(await _search(client, key)) for key in ("tenant-a", "tenant-b")]

        assert outcomes == [True, False]
        assert [b["input"] for b in runner.bodies("/v1/embeddings")] == [[QUERY], [QUERY]]
