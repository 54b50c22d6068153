"""The query path makes one store call per search, whatever the mode, on both backends: collection
settings come from this process's cache (invalidated by its own changes), and nothing counts points per
query. ``GET /v1/collections`` makes one call, not one per collection. Counted at our own store boundary
(``EdgeStore._run``, ``ProcessStore._run``, ``ServerStore._call``), with the real engines behind it and the real MiniLM runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from qdrant_client import AsyncQdrantClient

from service.config import Settings
from tests.support.app import app_client
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings

DOCS = [{"id": f"d{i}", "text": f"note {i} about rivers and {['owls', 'moths', 'bats'][i % 3]}"} for i in range(30)]


def count_calls(store: Any) -> list[str]:
    calls: list[str] = []
    name = "_run" if store.backend == "edge" else "_call"
    original = getattr(store, name)

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return await original(*args, **kwargs)

    setattr(store, name, counted)
    return calls


@pytest.mark.parametrize("backend", ["edge", "server"])
async def test_one_store_call_per_search_and_per_listing(minilm_settings: Settings, backend: str) -> None:
    client_override = AsyncQdrantClient(location=":memory:") if backend == "server" else None
    minilm_settings.qdrant.metadata_ttl_s = 3600  # a slow, shared machine must not expire the cache mid-test
    async with app_client(minilm_settings, store_client=client_override) as client:
        for name in ("a", "b", "c"):
            assert (await client.post("/v1/collections", json={"name": name})).status_code == 201
        assert (await client.post("/v1/collections/a/documents", json={"documents": DOCS})).status_code == 200
        store = client.services.store  # type: ignore[attr-defined]
        calls = count_calls(store)
        for mode in ("dense", "sparse", "hybrid", "hybrid", "dense"):
            r = await client.post("/v1/search", json={"collection": "a", "query": "rivers owls", "mode": mode})
            assert r.status_code == 200 and r.json()["hits"], r.text
        assert len(calls) == 5
        calls.clear()
        listed = await client.get("/v1/collections")
        assert [c["name"] for c in listed.json()["collections"]] == ["a", "b", "c"]
        assert listed.json()["collections"][0]["points"] == (30 if backend == "edge" else 0)  # server: as cached
        assert len(calls) == 1


@pytest.mark.parametrize("edge_process", [False, True], ids=["edge", "edge-process"])
async def test_one_store_call_per_search_with_the_runner_scripted(tmp_path: Path, edge_process: bool) -> None:
    """The same count without vLLM (the embedding runner scripted at the network edge), with the embedded store
    in this process and in its own (where each call is one message over its pipe)."""
    runner = ScriptedEmbedder()
    settings = scripted_settings(tmp_path, qdrant={"edge_process": edge_process})
    async with app_client(settings, transports={"embedding": runner.transport}) as client:
        assert (await client.post("/v1/collections", json={"name": "a"})).status_code == 201
        assert (await client.post("/v1/collections/a/documents", json={"documents": DOCS})).status_code == 200
        calls = count_calls(client.services.store)  # type: ignore[attr-defined]
        for mode in ("dense", "sparse", "hybrid", "hybrid", "dense"):
            r = await client.post("/v1/search", json={"collection": "a", "query": "rivers owls", "mode": mode})
            assert r.status_code == 200 and r.json()["hits"], r.text
        assert len(calls) == 5
